# The fuzz targets: one line each, read by both sides (tests/fuzz/CMakeLists.txt builds them
# with clang and libFuzzer; tests/fuzz/tests.cmake registers a ctest entry fuzz.<name> for each).
#
#   cs_fuzz_target(<name> SOURCES <project source>... [PKGS <pkg-config module>...] [PROTO])
#
# The target's own code is tests/fuzz/fuzz_<name>.c and its seeds tests/fuzz/corpus/<name>/.
# SOURCES are the project files under test, relative to the repository root: only what the
# target calls (no daemon, no gRPC server). PKGS are the pkg-config modules they link with.
# PROTO links the protobuf-c code generated from proto/ (compiled in the fuzz build itself).
cs_fuzz_target(rpc_wire SOURCES shared/rpc_codec.c shared/utf8.c shared/error.c shared/util.c
               PKGS grpc openssl libprotobuf-c PROTO)
cs_fuzz_target(kube_bundle SOURCES nodeagent/kube_bundle.c shared/error.c shared/util.c
               PKGS jansson)
cs_fuzz_target(ws_path SOURCES nodeagent/workspace_io.c shared/utf8.c shared/error.c shared/util.c)
cs_fuzz_target(kube_watch SOURCES frontend/kube_framer.c shared/error.c shared/util.c PKGS jansson)
cs_fuzz_target(kubeconfig SOURCES frontend/kube_config.c shared/base64.c shared/error.c shared/util.c
               PKGS jansson yaml-0.1)
cs_fuzz_target(spawn_frame SOURCES shared/spawn_frame.c shared/utf8.c PKGS libprotobuf-c PROTO)
cs_fuzz_target(netpolicy SOURCES shared/netpolicy.c shared/error.c shared/util.c)
cs_fuzz_target(dns SOURCES nodeagent/dns_proxy_msg.c shared/netpolicy.c shared/error.c shared/util.c
               PKGS ldns)
