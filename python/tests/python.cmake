# The Python binding's tests as one CTest test, `python`: scripts/test-python.sh builds the package into
# a virtual environment in the build directory and runs pytest on python/tests against this build's CLI.
# Included from tests/CMakeLists.txt after embed.cmake (the embedding tests need its MiniLM fixture).
#
# Skipped under KILN_SANITIZE: the package builds its own libkiln.so without sanitizers, so the run would
# test nothing the plain build does not, and loading an ASan library into CPython needs libasan
# preloaded into the interpreter, which is fragile. Skipped when cross-compiling: the package is built
# for the host.
if(KILN_SANITIZE OR CMAKE_CROSSCOMPILING)
  add_test(NAME python COMMAND ${CMAKE_COMMAND} -E echo
           "python: skipped in sanitizer and cross builds (the plain build runs it; see python/tests/python.cmake)")
  set_tests_properties(python PROPERTIES SKIP_REGULAR_EXPRESSION "python: skipped")
else()
  add_test(NAME python COMMAND ${CMAKE_SOURCE_DIR}/scripts/test-python.sh ${CMAKE_BINARY_DIR}
                               $<TARGET_FILE:kiln_cli>)
  # Cold, the first run installs the pinned packages and compiles libkiln.so (about a minute).
  set_tests_properties(python PROPERTIES TIMEOUT 900 FIXTURES_REQUIRED minilm)
endif()
