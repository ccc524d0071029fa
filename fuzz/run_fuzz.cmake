# run_fuzz.cmake - the CTest driver of a bounded fuzz run. Copies the checked-in seeds into a work corpus
# in the build directory (the repository's corpus is never modified; new inputs accumulate in the work
# copy across runs), then runs the fuzzer over it with -print_final_stats=1 (executions, edges covered,
# corpus size). Variables: FUZZER, SEEDS, WORK, ARTIFACTS, DICT, SECONDS, MAX_LEN (0: libFuzzer's default
# input length); the environment variable KILN_FUZZ_SECONDS, when set, overrides SECONDS
# (`make fuzz FUZZ_SECONDS=N`), and KILN_FUZZ_RUNS, when above 0, also stops the run after that many
# executions (`make fuzz FUZZ_RUNS=N`).
if(DEFINED ENV{KILN_FUZZ_SECONDS})
  set(SECONDS $ENV{KILN_FUZZ_SECONDS})
endif()
set(runs_arg)
if(DEFINED ENV{KILN_FUZZ_RUNS} AND "$ENV{KILN_FUZZ_RUNS}" GREATER 0)
  set(runs_arg -runs=$ENV{KILN_FUZZ_RUNS})
endif()
set(max_len_arg)
if(MAX_LEN GREATER 0)
  set(max_len_arg -max_len=${MAX_LEN})
endif()
file(MAKE_DIRECTORY ${WORK} ${ARTIFACTS})
file(GLOB seeds ${SEEDS}/*)
file(COPY ${seeds} DESTINATION ${WORK})
execute_process(
  COMMAND ${FUZZER} ${WORK} -max_total_time=${SECONDS} -rss_limit_mb=2048 -timeout=10 -dict=${DICT} ${max_len_arg} ${runs_arg}
          -artifact_prefix=${ARTIFACTS}/ -print_final_stats=1
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${FUZZER} failed (exit ${rc}); reproducers are in ${ARTIFACTS}")
endif()
