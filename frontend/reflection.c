/* grpc.reflection.v1 and v1alpha ServerReflectionInfo over the embedded descriptor set.
 *
 * v1alpha is v1 under its first package name, wire for wire: one handler with the v1
 * messages answers both paths. Answers follow the protocol as gRPC's own servers give them:
 * a file comes with its transitive imports (the file first), a name nobody declares is an
 * ErrorResponse with NOT_FOUND and the stream goes on, a request with nothing set is an
 * ErrorResponse with INVALID_ARGUMENT. */
#include "reflection.h"

#include <stdlib.h>
#include <string.h>

#include "google/protobuf/descriptor.pb-c.h"
#include "grpc/reflection/v1/reflection.pb-c.h"
#include "util.h"

typedef Grpc__Reflection__V1__ServerReflectionRequest refl_request;
typedef Grpc__Reflection__V1__ServerReflectionResponse refl_response;

typedef struct refl_file {
        char *name;
        const uint8_t *data; /* the serialized FileDescriptorProto, inside the set */
        size_t len;
        size_t *deps;     /* indexes of the files it imports */
        char **dep_names; /* their names */
        size_t n_deps;
} refl_file;

typedef struct refl_symbol {
        char *name;
        size_t file;
} refl_symbol;

typedef struct refl_ext {
        char *extendee;
        int32_t number;
        size_t file;
} refl_ext;

struct cs_reflection {
        refl_file *files;
        size_t n_files, cap_files;
        refl_symbol *symbols; /* sorted by name after indexing */
        size_t n_symbols, cap_symbols;
        refl_ext *exts;
        size_t n_exts, cap_exts;
        char **services; /* sorted */
        size_t n_services, cap_services;
        /* The list_services answer, the same for every request: built once. */
        Grpc__Reflection__V1__ListServiceResponse list;
        Grpc__Reflection__V1__ServiceResponse *service_items;
        Grpc__Reflection__V1__ServiceResponse **service_ptrs;
        rpc_bidi_method methods[2];
};

/* --- reading the set ------------------------------------------------------------------- */

/* Reads a varint at *p (below end); false when it runs past end or past 64 bits. */
static bool read_varint(const uint8_t **p, const uint8_t *end, uint64_t *ret)
{
        uint64_t v = 0;

        for (unsigned shift = 0; shift < 64 && *p < end; shift += 7) {
                uint8_t b = *(*p)++;
                v |= (uint64_t)(b & 0x7f) << shift;
                if (!(b & 0x80)) {
                        *ret = v;
                        return true;
                }
        }
        return false;
}

/* The files of a FileDescriptorSet (`repeated FileDescriptorProto file = 1`), as slices of
 * the set: each file is served as the very bytes protoc wrote. */
static int split_set(cs_reflection *r, const uint8_t *set, size_t len, cs_error **err)
{
        const uint8_t *p = set, *end = set + len;

        while (p < end) {
                uint64_t key, n;

                if (!read_varint(&p, end, &key) || key != ((1 << 3) | 2) ||
                    !read_varint(&p, end, &n) || n > (uint64_t)(end - p))
                        return cs_error_set(err, GRPC_STATUS_INTERNAL,
                                            "reflection: the descriptor set does not decode "
                                            "at byte %zu",
                                            (size_t)(p - set));
                r->files = cs_xgrow(r->files, r->n_files, &r->cap_files, sizeof(*r->files));
                r->files[r->n_files++] = (refl_file){ .data = p, .len = (size_t)n };
                p += n;
        }
        return 0;
}

static void add_symbol(cs_reflection *r, char *name, size_t file)
{
        r->symbols = cs_xgrow(r->symbols, r->n_symbols, &r->cap_symbols, sizeof(*r->symbols));
        r->symbols[r->n_symbols++] = (refl_symbol){ .name = name, .file = file };
}

/* "scope.name", or "name" at the top of a file without a package. */
static char *qualify(const char *scope, const char *name)
{
        return scope && scope[0] ? cs_xasprintf("%s.%s", scope, name) : cs_xstrdup(name);
}

static void add_extension(cs_reflection *r, const char *scope,
                          const Google__Protobuf__FieldDescriptorProto *f, size_t file)
{
        const char *extendee = f->extendee ? f->extendee : "";

        add_symbol(r, qualify(scope, f->name), file);
        r->exts = cs_xgrow(r->exts, r->n_exts, &r->cap_exts, sizeof(*r->exts));
        /* protoc writes resolved type names with a leading dot; requests come without. */
        r->exts[r->n_exts++] = (refl_ext){ .extendee = cs_xstrdup(extendee + (extendee[0] == '.')),
                                           .number = f->number,
                                           .file = file };
}

/* An enum and its values: values are scoped as the enum's siblings, as in protobuf. */
static void add_enum(cs_reflection *r, const char *scope,
                     const Google__Protobuf__EnumDescriptorProto *e, size_t file)
{
        add_symbol(r, qualify(scope, e->name), file);
        for (size_t i = 0; i < e->n_value; i++)
                add_symbol(r, qualify(scope, e->value[i]->name), file);
}

static void add_message(cs_reflection *r, const char *scope,
                        const Google__Protobuf__DescriptorProto *m, size_t file)
{
        char *full = qualify(scope, m->name);

        add_symbol(r, full, file);
        for (size_t i = 0; i < m->n_field; i++)
                add_symbol(r, qualify(full, m->field[i]->name), file);
        for (size_t i = 0; i < m->n_oneof_decl; i++)
                add_symbol(r, qualify(full, m->oneof_decl[i]->name), file);
        for (size_t i = 0; i < m->n_enum_type; i++)
                add_enum(r, full, m->enum_type[i], file);
        for (size_t i = 0; i < m->n_extension; i++)
                add_extension(r, full, m->extension[i], file);
        for (size_t i = 0; i < m->n_nested_type; i++)
                add_message(r, full, m->nested_type[i], file);
}

static void add_service(cs_reflection *r, const char *scope,
                        const Google__Protobuf__ServiceDescriptorProto *s, size_t file)
{
        char *full = qualify(scope, s->name);

        add_symbol(r, full, file);
        for (size_t i = 0; i < s->n_method; i++)
                add_symbol(r, qualify(full, s->method[i]->name), file);
        r->services = cs_xgrow(r->services, r->n_services, &r->cap_services, sizeof(char *));
        r->services[r->n_services++] = cs_xstrdup(full);
}

static void index_file(cs_reflection *r, const Google__Protobuf__FileDescriptorProto *fd,
                       size_t file)
{
        const char *pkg = fd->package;

        for (size_t i = 0; i < fd->n_message_type; i++)
                add_message(r, pkg, fd->message_type[i], file);
        for (size_t i = 0; i < fd->n_enum_type; i++)
                add_enum(r, pkg, fd->enum_type[i], file);
        for (size_t i = 0; i < fd->n_service; i++)
                add_service(r, pkg, fd->service[i], file);
        for (size_t i = 0; i < fd->n_extension; i++)
                add_extension(r, pkg, fd->extension[i], file);
}

/* Decodes file i, names it, indexes its symbols and keeps the names of its imports, which
 * resolve_deps() turns into indexes once every file is named (--include_imports writes a
 * file's imports before it, but nothing here relies on that). */
static int read_file(cs_reflection *r, size_t i, cs_error **err)
{
        refl_file *f = &r->files[i];
        Google__Protobuf__FileDescriptorProto *fd =
                google__protobuf__file_descriptor_proto__unpack(NULL, f->len, f->data);

        if (!fd || !fd->name) {
                if (fd)
                        google__protobuf__file_descriptor_proto__free_unpacked(fd, NULL);
                return cs_error_set(err, GRPC_STATUS_INTERNAL,
                                    "reflection: file %zu of the descriptor set does not decode",
                                    i);
        }
        f->name = cs_xstrdup(fd->name);
        index_file(r, fd, i);
        f->n_deps = fd->n_dependency;
        f->deps = cs_xcalloc(f->n_deps + 1, sizeof(*f->deps));
        f->dep_names = cs_xcalloc(f->n_deps + 1, sizeof(*f->dep_names));
        for (size_t d = 0; d < f->n_deps; d++)
                f->dep_names[d] = cs_xstrdup(fd->dependency[d]);
        google__protobuf__file_descriptor_proto__free_unpacked(fd, NULL);
        return 0;
}

/* The import names read_file() kept, as file indexes. */
static int resolve_deps(cs_reflection *r, cs_error **err)
{
        for (size_t i = 0; i < r->n_files; i++) {
                refl_file *f = &r->files[i];

                for (size_t d = 0; d < f->n_deps; d++) {
                        ssize_t target = cs_reflection_file_by_name(r, f->dep_names[d]);

                        if (target < 0)
                                return cs_error_set(err, GRPC_STATUS_INTERNAL,
                                                    "reflection: %s imports %s, which the "
                                                    "descriptor set lacks",
                                                    f->name, f->dep_names[d]);
                        f->deps[d] = (size_t)target;
                }
        }
        return 0;
}

static int cmp_symbol(const void *a, const void *b)
{
        return strcmp(((const refl_symbol *)a)->name, ((const refl_symbol *)b)->name);
}

static int cmp_string(const void *a, const void *b)
{
        return strcmp(*(char *const *)a, *(char *const *)b);
}

static void build_service_list(cs_reflection *r)
{
        grpc__reflection__v1__list_service_response__init(&r->list);
        r->service_items = cs_xcalloc(r->n_services + 1, sizeof(*r->service_items));
        r->service_ptrs = cs_xcalloc(r->n_services + 1, sizeof(*r->service_ptrs));
        for (size_t i = 0; i < r->n_services; i++) {
                grpc__reflection__v1__service_response__init(&r->service_items[i]);
                r->service_items[i].name = r->services[i];
                r->service_ptrs[i] = &r->service_items[i];
        }
        r->list.service = r->service_ptrs;
        r->list.n_service = r->n_services;
}

cs_reflection *cs_reflection_new(const uint8_t *set, size_t len, cs_error **err)
{
        cs_reflection *r = cs_xcalloc(1, sizeof(*r));

        if (split_set(r, set, len, err) < 0)
                goto fail;
        for (size_t i = 0; i < r->n_files; i++)
                if (read_file(r, i, err) < 0)
                        goto fail;
        if (resolve_deps(r, err) < 0)
                goto fail;
        /* qsort and bsearch want an array even when there is nothing (UBSan holds them to
         * it): a set without services has none. */
        if (r->n_symbols)
                qsort(r->symbols, r->n_symbols, sizeof(*r->symbols), cmp_symbol);
        if (r->n_services)
                qsort(r->services, r->n_services, sizeof(*r->services), cmp_string);
        build_service_list(r);
        return r;
fail:
        cs_reflection_free(r);
        return NULL;
}

void cs_reflection_free(cs_reflection *r)
{
        if (!r)
                return;
        for (size_t i = 0; i < r->n_files; i++) {
                free(r->files[i].name);
                free(r->files[i].deps);
                for (size_t d = 0; r->files[i].dep_names && d < r->files[i].n_deps; d++)
                        free(r->files[i].dep_names[d]);
                free(r->files[i].dep_names);
        }
        for (size_t i = 0; i < r->n_symbols; i++)
                free(r->symbols[i].name);
        for (size_t i = 0; i < r->n_exts; i++)
                free(r->exts[i].extendee);
        for (size_t i = 0; i < r->n_services; i++)
                free(r->services[i]);
        free(r->files);
        free(r->symbols);
        free(r->exts);
        free(r->services);
        free(r->service_items);
        free(r->service_ptrs);
        free(r);
}

/* --- lookups --------------------------------------------------------------------------- */

ssize_t cs_reflection_file_by_name(const cs_reflection *r, const char *name)
{
        for (size_t i = 0; i < r->n_files; i++)
                if (r->files[i].name && strcmp(r->files[i].name, name) == 0)
                        return (ssize_t)i;
        return -1;
}

ssize_t cs_reflection_file_by_symbol(const cs_reflection *r, const char *symbol)
{
        refl_symbol key = { .name = (char *)symbol };
        const refl_symbol *s = r->n_symbols ? bsearch(&key, r->symbols, r->n_symbols,
                                                      sizeof(*r->symbols), cmp_symbol)
                                            : NULL;

        return s ? (ssize_t)s->file : -1;
}

ssize_t cs_reflection_file_by_extension(const cs_reflection *r, const char *type, int32_t number)
{
        for (size_t i = 0; i < r->n_exts; i++)
                if (r->exts[i].number == number && strcmp(r->exts[i].extendee, type) == 0)
                        return (ssize_t)r->exts[i].file;
        return -1;
}

size_t cs_reflection_n_services(const cs_reflection *r)
{
        return r->n_services;
}

const char *cs_reflection_service(const cs_reflection *r, size_t i)
{
        return i < r->n_services ? r->services[i] : NULL;
}

/* --- answering ------------------------------------------------------------------------- */

/* One answer and everything it points to that is not the index's: freed once it is sent
 * (rpc_call_send encodes before it returns), so a stream holds one answer at a time however
 * many requests it makes. */
typedef struct refl_answer {
        refl_response resp;
        Grpc__Reflection__V1__ErrorResponse error;
        Grpc__Reflection__V1__FileDescriptorResponse files;
        Grpc__Reflection__V1__ExtensionNumberResponse numbers;
        char *error_message;
        bool *seen;
        size_t *order;
} refl_answer;

static void answer_clear(refl_answer *a)
{
        free(a->error_message);
        free(a->files.file_descriptor_proto);
        free(a->numbers.extension_number);
        free(a->seen);
        free(a->order);
}

/* Names from the request are cut in the message: it echoes them, and they are the client's. */
#define REFL_NAME_IN_ERROR_MAX 256

static void answer_error(refl_answer *a, grpc_status_code code, const char *what, const char *name)
{
        a->error_message =
                name ? cs_xasprintf("%s not found: %.*s", what, REFL_NAME_IN_ERROR_MAX, name)
                     : cs_xstrdup(what);
        a->error.error_code = code;
        a->error.error_message = a->error_message;
        a->resp.message_response_case =
                GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_ERROR_RESPONSE;
        a->resp.error_response = &a->error;
}

/* Appends file i and, depth first, every file it imports that is not listed yet. */
static void collect_file(const cs_reflection *r, size_t i, bool *seen, size_t *order, size_t *n)
{
        if (seen[i])
                return;
        seen[i] = true;
        order[(*n)++] = i;
        for (size_t d = 0; d < r->files[i].n_deps; d++)
                collect_file(r, r->files[i].deps[d], seen, order, n);
}

/* The file (with its imports), or NOT_FOUND naming what was asked. */
static void answer_file(const cs_reflection *r, refl_answer *a, ssize_t file, const char *what,
                        const char *name)
{
        size_t n = 0;

        if (file < 0) {
                answer_error(a, GRPC_STATUS_NOT_FOUND, what, name);
                return;
        }
        a->seen = cs_xcalloc(r->n_files, sizeof(*a->seen));
        a->order = cs_xcalloc(r->n_files, sizeof(*a->order));
        collect_file(r, (size_t)file, a->seen, a->order, &n);
        a->files.file_descriptor_proto = cs_xcalloc(n, sizeof(ProtobufCBinaryData));
        for (size_t i = 0; i < n; i++)
                a->files.file_descriptor_proto[i] = (ProtobufCBinaryData){
                        .len = r->files[a->order[i]].len,
                        .data = (uint8_t *)r->files[a->order[i]].data,
                };
        a->files.n_file_descriptor_proto = n;
        a->resp.message_response_case =
                GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_FILE_DESCRIPTOR_RESPONSE;
        a->resp.file_descriptor_response = &a->files;
}

static void answer_extension_numbers(const cs_reflection *r, refl_answer *a, const char *type)
{
        /* Any symbol of the set is taken for a type: what is not a message has no extensions
         * either, and the protocol asks only for NOT_FOUND on unknown names. */
        if (cs_reflection_file_by_symbol(r, type) < 0) {
                answer_error(a, GRPC_STATUS_NOT_FOUND, "type", type);
                return;
        }
        a->numbers.base_type_name = (char *)type;
        a->numbers.extension_number = cs_xcalloc(r->n_exts + 1, sizeof(int32_t));
        for (size_t i = 0; i < r->n_exts; i++)
                if (strcmp(r->exts[i].extendee, type) == 0)
                        a->numbers.extension_number[a->numbers.n_extension_number++] =
                                r->exts[i].number;
        a->resp.message_response_case =
                GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_ALL_EXTENSION_NUMBERS_RESPONSE;
        a->resp.all_extension_numbers_response = &a->numbers;
}

static void answer(cs_reflection *r, const refl_request *req, refl_answer *a)
{
        const Grpc__Reflection__V1__ExtensionRequest *ext = req->file_containing_extension;
        _cleanup_free_ char *ext_name = NULL;

        a->resp.valid_host = req->host;
        a->resp.original_request = (refl_request *)req;
        switch (req->message_request_case) {
        case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_BY_FILENAME:
                answer_file(r, a, cs_reflection_file_by_name(r, req->file_by_filename), "file",
                            req->file_by_filename);
                break;
        case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_CONTAINING_SYMBOL:
                answer_file(r, a, cs_reflection_file_by_symbol(r, req->file_containing_symbol),
                            "symbol", req->file_containing_symbol);
                break;
        case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_CONTAINING_EXTENSION:
                ext_name = cs_xasprintf("%.*s(%d)", REFL_NAME_IN_ERROR_MAX, ext->containing_type,
                                        ext->extension_number);
                answer_file(r, a,
                            cs_reflection_file_by_extension(r, ext->containing_type,
                                                            ext->extension_number),
                            "extension", ext_name);
                break;
        case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_ALL_EXTENSION_NUMBERS_OF_TYPE:
                answer_extension_numbers(r, a, req->all_extension_numbers_of_type);
                break;
        case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_LIST_SERVICES:
                a->resp.message_response_case =
                        GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_LIST_SERVICES_RESPONSE;
                a->resp.list_services_response = &r->list;
                break;
        default:
                answer_error(a, GRPC_STATUS_INVALID_ARGUMENT,
                             "the request sets none of the requests this server knows", NULL);
                break;
        }
}

/* One stream: an answer for each request, until the client closes its side. */
static int reflection_info(rpc_call *call, void *userdata, cs_error **err)
{
        cs_reflection *r = userdata;

        for (unsigned n = 0;; n++) {
                ProtobufCMessage *msg = NULL;
                refl_answer a = { .resp = GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__INIT,
                                  .error = GRPC__REFLECTION__V1__ERROR_RESPONSE__INIT,
                                  .files = GRPC__REFLECTION__V1__FILE_DESCRIPTOR_RESPONSE__INIT,
                                  .numbers =
                                          GRPC__REFLECTION__V1__EXTENSION_NUMBER_RESPONSE__INIT };
                int rc = rpc_call_recv_idle(call, CS_REFLECTION_MAX_REQUEST_BYTES,
                                            CS_REFLECTION_IDLE_MS, &msg, err);

                if (rc <= 0)
                        return rc;
                if (n == CS_REFLECTION_MAX_REQUESTS_PER_STREAM) {
                        protobuf_c_message_free_unpacked(msg, NULL);
                        return cs_error_set(err, GRPC_STATUS_RESOURCE_EXHAUSTED,
                                            "more than %d requests on one reflection stream",
                                            CS_REFLECTION_MAX_REQUESTS_PER_STREAM);
                }
                answer(r, (const refl_request *)msg, &a);
                rc = rpc_call_send(call, &a.resp.base, err);
                answer_clear(&a);
                protobuf_c_message_free_unpacked(msg, NULL);
                if (rc < 0)
                        return -1;
        }
}

int cs_reflection_register(rpc_server *srv, cs_reflection *r, cs_error **err)
{
        static const char *const paths[] = {
                "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
                "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
        };

        for (size_t i = 0; i < ARRAY_SIZE(paths); i++) {
                r->methods[i] = (rpc_bidi_method){
                        .path = paths[i],
                        .request = &grpc__reflection__v1__server_reflection_request__descriptor,
                        .response = &grpc__reflection__v1__server_reflection_response__descriptor,
                        .handler = reflection_info,
                        .userdata = r,
                };
                if (rpc_server_add_bidi_method(srv, &r->methods[i], err) < 0)
                        return -1;
        }
        return 0;
}
