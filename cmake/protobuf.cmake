# cs_protobuf_c(OUT_SRCS PROTO_DIR proto...)
#
# Generates protobuf-c sources for each .proto (path relative to PROTO_DIR) into
# ${CMAKE_BINARY_DIR}/gen and returns the .pb-c.c files in OUT_SRCS. Imports resolve
# against PROTO_DIR and the system include directory (google/protobuf/*.proto).
set(CS_PROTO_GEN_DIR ${CMAKE_BINARY_DIR}/gen)
set(CS_PROTO_SYSTEM_DIR /usr/include)

function(cs_protobuf_c out_srcs proto_dir)
        set(srcs)
        foreach(proto ${ARGN})
                get_filename_component(dir ${proto} DIRECTORY)
                get_filename_component(name ${proto} NAME_WE)
                set(base ${CS_PROTO_GEN_DIR}/${dir}/${name})
                if(EXISTS ${proto_dir}/${proto})
                        set(src ${proto_dir}/${proto})
                        set(include_dir ${proto_dir})
                else()
                        set(src ${CS_PROTO_SYSTEM_DIR}/${proto})
                        set(include_dir ${CS_PROTO_SYSTEM_DIR})
                endif()
                add_custom_command(
                        OUTPUT ${base}.pb-c.c ${base}.pb-c.h
                        COMMAND ${CMAKE_COMMAND} -E make_directory ${CS_PROTO_GEN_DIR}
                        COMMAND ${PROTOC_C} -I${include_dir} -I${proto_dir} -I${CS_PROTO_SYSTEM_DIR}
                                --c_out=${CS_PROTO_GEN_DIR} ${src}
                        DEPENDS ${src}
                        COMMENT "protoc-c ${proto}"
                        VERBATIM)
                list(APPEND srcs ${base}.pb-c.c)
        endforeach()
        set(${out_srcs} ${srcs} PARENT_SCOPE)
endfunction()

# cs_protobuf_python(TARGET PROTO_DIR OUT_DIR proto...)
#
# Generates Python modules (protoc --python_out) for the independent test client.
function(cs_protobuf_python target proto_dir out_dir)
        set(outs)
        set(srcs)
        foreach(proto ${ARGN})
                get_filename_component(dir ${proto} DIRECTORY)
                get_filename_component(name ${proto} NAME_WE)
                list(APPEND outs ${out_dir}/${dir}/${name}_pb2.py)
                list(APPEND srcs ${proto_dir}/${proto})
        endforeach()
        add_custom_command(
                OUTPUT ${outs}
                COMMAND ${CMAKE_COMMAND} -E make_directory ${out_dir}
                COMMAND ${PROTOC} -I${proto_dir} -I${CS_PROTO_SYSTEM_DIR} --python_out=${out_dir} ${ARGN}
                WORKING_DIRECTORY ${proto_dir}
                DEPENDS ${srcs}
                COMMENT "protoc --python_out"
                VERBATIM)
        add_custom_target(${target} ALL DEPENDS ${outs})
endfunction()
