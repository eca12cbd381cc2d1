# Writes OUT, a header defining NAME as a hash of FILES and EXTRA (compiler,
# flags): hsnn_build_token's script, run at build time so that editing any
# of FILES retires what the previous build put in the cache. FILES comes
# '|'-separated (a ';' would split the command's argument).
include(${CMAKE_CURRENT_LIST_DIR}/HashFiles.cmake)
string(REPLACE "|" ";" FILES "${FILES}")
hsnn_hash_files(token "${EXTRA}" ${FILES})
file(WRITE ${OUT}.tmp "#pragma once\n#define ${NAME} \"${token}\"\n")
execute_process(COMMAND ${CMAKE_COMMAND} -E copy_if_different ${OUT}.tmp ${OUT})
file(REMOVE ${OUT}.tmp)
