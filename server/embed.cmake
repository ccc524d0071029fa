# server/embed.cmake - the chat page (server/page.html) compiled into kiln serve as a C array, so the server
# reads nothing from disk. Included from CMakeLists.txt, it adds a build step that runs this same file in
# script mode (cmake -DIN=page.html -DOUT=page_html.c -P embed.cmake) whenever the page changes, and adds
# the generated file to the server library. The array ends with a NUL that ks_page_html_len leaves out.
if(CMAKE_SCRIPT_MODE_FILE)
  file(READ "${IN}" hex HEX)
  string(LENGTH "${hex}" digits)
  math(EXPR bytes "${digits} / 2")
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," array "${hex}")
  string(REGEX REPLACE "((0x..,){20})" "\\1\n" array "${array}")
  file(WRITE "${OUT}"
       "/* Generated from server/page.html by server/embed.cmake; do not edit. */\n"
       "#include <stddef.h>\n"
       "extern const unsigned char ks_page_html[];\nextern const size_t ks_page_html_len;\n"
       "const unsigned char ks_page_html[] = {\n${array}0x00};\n"
       "const size_t ks_page_html_len = ${bytes};\n")
  return()
endif()

if(TARGET kiln_server_objects)
  set(KILN_PAGE_C ${CMAKE_BINARY_DIR}/generated/page_html.c)
  add_custom_command(
    OUTPUT ${KILN_PAGE_C}
    COMMAND ${CMAKE_COMMAND} -DIN=${CMAKE_SOURCE_DIR}/server/page.html -DOUT=${KILN_PAGE_C}
            -P ${CMAKE_SOURCE_DIR}/server/embed.cmake
    DEPENDS ${CMAKE_SOURCE_DIR}/server/page.html ${CMAKE_SOURCE_DIR}/server/embed.cmake
    COMMENT "Embedding server/page.html"
    VERBATIM)
  target_sources(kiln_server_objects PRIVATE ${KILN_PAGE_C})
endif()
