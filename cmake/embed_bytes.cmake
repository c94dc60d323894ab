# cmake -DIN=file -DOUT=file.c -DNAME=symbol -P embed_bytes.cmake
#
# Writes IN's bytes as a C array: `const unsigned char NAME[]` and `const size_t NAME_len`,
# for data a binary carries inside itself (the frontend's reflection descriptors).
file(READ ${IN} hex HEX)
string(LENGTH "${hex}" hex_len)
math(EXPR len "${hex_len} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
# 16 bytes a line, so the file stays readable by tools that read lines.
string(REGEX REPLACE "((0x..,){16})" "\\1\n" bytes "${bytes}")
file(WRITE ${OUT}
     "/* Generated from ${IN} by cmake/embed_bytes.cmake: do not edit. */\n"
     "#include <stddef.h>\n\n"
     "const unsigned char ${NAME}[] = {\n${bytes}\n};\n"
     "const size_t ${NAME}_len = ${len};\n")
