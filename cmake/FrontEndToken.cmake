# Writes OUT, a header defining HSNN_FRONT_END_TOKEN: a hash of FILES (the
# sources a model snapshot's contents depend on: parser, simplifier,
# derivative rules, lowering) and EXTRA (compiler, flags). Run at build
# time, so editing any of them retires every snapshot made before.
# FILES comes '|'-separated (a ';' would split the command's argument).
include(${CMAKE_CURRENT_LIST_DIR}/HashFiles.cmake)
string(REPLACE "|" ";" FILES "${FILES}")
hsnn_hash_files(token "${EXTRA}" ${FILES})
file(WRITE ${OUT}.tmp "#pragma once\n#define HSNN_FRONT_END_TOKEN \"${token}\"\n")
execute_process(COMMAND ${CMAKE_COMMAND} -E copy_if_different ${OUT}.tmp ${OUT})
file(REMOVE ${OUT}.tmp)
