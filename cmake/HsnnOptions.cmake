# Shared compile settings for hsnn targets.

# IEEE semantics everywhere: no -ffast-math, and no contraction of a*b+c into
# an FMA, so the interpreter gives the same bits on every build.
set(HSNN_COMMON_FLAGS -Wall -Wextra -Wno-unused-parameter -ffp-contract=off -fno-math-errno)

if(HSNN_SANITIZE)
  set(HSNN_SANITIZE_FLAGS -fsanitize=${HSNN_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
endif()
if(HSNN_FUZZ)
  # Coverage instrumentation for everything the fuzzer links; only the
  # fuzzer itself links libFuzzer's main.
  list(APPEND HSNN_SANITIZE_FLAGS -fsanitize=fuzzer-no-link)
endif()

# hsnn_target_defaults(TARGET): warnings, IEEE flags and sanitizers.
function(hsnn_target_defaults target)
  target_compile_options(${target} PRIVATE ${HSNN_COMMON_FLAGS})
  if(HSNN_SANITIZE_FLAGS)
    target_compile_options(${target} PRIVATE ${HSNN_SANITIZE_FLAGS})
    target_link_options(${target} PRIVATE ${HSNN_SANITIZE_FLAGS})
  endif()
endfunction()
