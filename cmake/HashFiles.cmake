# hsnn_hash_files(OUT EXTRA FILES...): the first 20 hex digits of a SHA-256
# over EXTRA and each file's SHA-256, in the order given: the build tokens
# that retire what another build made (code generator modules, model
# snapshots).
function(hsnn_hash_files out extra)
  set(text "${extra}")
  foreach(f ${ARGN})
    file(SHA256 ${f} h)
    string(APPEND text ";${h}")
  endforeach()
  string(SHA256 token "${text}")
  string(SUBSTRING ${token} 0 20 token)
  set(${out} ${token} PARENT_SCOPE)
endfunction()
