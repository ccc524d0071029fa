# The ONNX reader's Python-driven tests as one CTest test, `onnx`: scripts/test-onnx.sh makes a virtual
# environment with the pinned onnx package in the build directory and runs pytest on tests/onnx against this
# build's libkiln.so (ctypes) and CLI. Included from tests/CMakeLists.txt.
#
# Skipped under KILN_SANITIZE (loading an ASan library into CPython needs libasan preloaded, which is
# fragile: the sanitizer build covers the same inputs through fuzz_onnx and test_onnx_api instead) and when
# cross-compiling.
if(KILN_SANITIZE OR CMAKE_CROSSCOMPILING)
  add_test(NAME onnx COMMAND ${CMAKE_COMMAND} -E echo
           "onnx: skipped in sanitizer and cross builds (the plain build runs it; see tests/onnx/onnx.cmake)")
  set_tests_properties(onnx PROPERTIES SKIP_REGULAR_EXPRESSION "onnx: skipped")
else()
  add_test(NAME onnx COMMAND ${CMAKE_SOURCE_DIR}/scripts/test-onnx.sh ${CMAKE_BINARY_DIR} $<TARGET_FILE:kiln_cli>)
  # Cold, the first run installs the pinned packages and makes the backend node test models (about a minute).
  set_tests_properties(onnx PROPERTIES TIMEOUT 900 ENVIRONMENT "KILN_LIB=$<TARGET_FILE:kiln_shared>")
endif()
