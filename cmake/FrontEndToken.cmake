# Writes OUT, a header defining HSNN_FRONT_END_TOKEN: a hash of FILES (the
# sources a model snapshot's contents depend on: parser, simplifier,
# derivative rules, lowering) and EXTRA (compiler, flags). Run at build
# time, so editing any of them retires every snapshot made before.
# FILES comes '|'-separated (a ';' would split the command's argument).
string(REPLACE "|" ";" FILES "${FILES}")
set(text "${EXTRA}")
foreach(f ${FILES})
  file(SHA256 ${f} h)
  string(APPEND text ";${h}")
endforeach()
string(SHA256 token "${text}")
string(SUBSTRING ${token} 0 20 token)
file(WRITE ${OUT}.tmp "#pragma once\n#define HSNN_FRONT_END_TOKEN \"${token}\"\n")
execute_process(COMMAND ${CMAKE_COMMAND} -E copy_if_different ${OUT}.tmp ${OUT})
file(REMOVE ${OUT}.tmp)
