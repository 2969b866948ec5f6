# Turns the approvals page's files into a C file (cmake -P): each file becomes
#   const unsigned char tg_ui_NAME[] (its bytes, NUL-terminated) and const size_t tg_ui_NAME_len,
# NAME being the file name with '.' as '_'. Run by the build with -DOUT=file.c -DIN="a;b;...".
set(src "/* generated from core/app/ui/ by core/app/ui/embed.cmake; do not edit */\n#include <stddef.h>\n")
foreach(f IN LISTS IN)
  get_filename_component(name "${f}" NAME)
  string(REPLACE "." "_" name "${name}")
  file(READ "${f}" hex HEX)
  string(LENGTH "${hex}" n)
  math(EXPR n "${n} / 2")
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
  string(REPEAT "0x..," 16 row) # CMake's regex has no {n}
  string(REGEX REPLACE "(${row})" "\\1\n" bytes "${bytes}")
  string(APPEND src "const unsigned char tg_ui_${name}[] = {\n${bytes}0x00};\nconst size_t tg_ui_${name}_len = ${n};\n")
endforeach()
file(WRITE "${OUT}.tmp" "${src}")
configure_file("${OUT}.tmp" "${OUT}" COPYONLY) # rewritten only when it changed
