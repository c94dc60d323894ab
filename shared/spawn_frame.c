/* compute.spawner.v1 frames (spawn_frame.h). */
#include "spawn_frame.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "utf8.h"

void spawn_reader_init(spawn_reader *r, size_t max_frame)
{
        *r = (spawn_reader){ .max_frame = max_frame };
}

void spawn_reader_free(spawn_reader *r)
{
        free(r->buf);
        *r = (spawn_reader){ .max_frame = r->max_frame };
}

static uint32_t prefix_of(const uint8_t *p)
{
        return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Bytes the frame being read still needs: its prefix first, then its payload. */
static size_t wanted(const spawn_reader *r)
{
        size_t have = r->len - r->consumed;
        size_t need;

        if (have < SPAWN_PREFIX)
                return SPAWN_PREFIX - have;
        need = prefix_of(r->buf + r->consumed);
        if (need > r->max_frame || have >= SPAWN_PREFIX + need)
                return 0;
        return SPAWN_PREFIX + need - have;
}

ssize_t spawn_reader_fill(spawn_reader *r, int fd)
{
        size_t want, room;
        ssize_t n;

        if (r->consumed) {
                memmove(r->buf, r->buf + r->consumed, r->len - r->consumed);
                r->len -= r->consumed;
                r->consumed = 0;
        }
        want = wanted(r);
        if (want == 0) {
                /* A whole frame is waiting, or the prefix is bad: next() says which. */
                errno = EAGAIN;
                return -1;
        }
        /* Read ahead up to a small frame's worth beyond what this one needs, never past the
         * largest frame plus its prefix. */
        room = r->max_frame + SPAWN_PREFIX - r->len;
        if (want < 4096 && room > want)
                want = room < 4096 ? room : 4096;
        if (r->cap < r->len + want) {
                size_t cap = r->cap ? r->cap : 4096;
                uint8_t *buf;

                while (cap < r->len + want)
                        cap *= 2;
                if (cap > r->max_frame + SPAWN_PREFIX)
                        cap = r->max_frame + SPAWN_PREFIX;
                buf = realloc(r->buf, cap);
                if (!buf) {
                        errno = ENOMEM;
                        return -1;
                }
                r->buf = buf;
                r->cap = cap;
        }
        do
                n = read(fd, r->buf + r->len, want);
        while (n < 0 && errno == EINTR);
        if (n > 0)
                r->len += (size_t)n;
        return n;
}

int spawn_reader_next(spawn_reader *r, const uint8_t **ret, size_t *ret_len, const char **why)
{
        size_t have = r->len - r->consumed;
        uint32_t need;

        if (have < SPAWN_PREFIX)
                return 0;
        need = prefix_of(r->buf + r->consumed);
        if (need > r->max_frame) {
                *why = "frame larger than the protocol allows";
                return -1;
        }
        if (have < SPAWN_PREFIX + (size_t)need)
                return 0;
        *ret = r->buf + r->consumed + SPAWN_PREFIX;
        *ret_len = need;
        r->consumed += SPAWN_PREFIX + need;
        return 1;
}

/* --- checks ---------------------------------------------------------------------------- */

static bool text_ok(const char *s, size_t max)
{
        size_t n = strlen(s);

        return n <= max && cs_utf8_valid(s, n);
}

const char *spawn_check_spawner(const spawn_spawner_frame *f)
{
        bool unnamed = f->kind_case == COMPUTE__SPAWNER__V1__SPAWNER_FRAME__KIND_HELLO ||
                       f->kind_case == COMPUTE__SPAWNER__V1__SPAWNER_FRAME__KIND_PONG;

        if (f->kind_case == COMPUTE__SPAWNER__V1__SPAWNER_FRAME__KIND__NOT_SET)
                return "frame without a kind";
        if (unnamed != (f->exec_id == 0))
                return unnamed ? "hello/pong with an exec_id" : "exec frame without an exec_id";
        switch (f->kind_case) {
        case COMPUTE__SPAWNER__V1__SPAWNER_FRAME__KIND_HELLO:
                if (f->hello->protocol != SPAWN_PROTOCOL)
                        return "hello.protocol is not 1";
                if (!text_ok(f->hello->version, SPAWN_MAX_VERSION))
                        return "hello.version too long or not UTF-8";
                if (f->hello->pid <= 0)
                        return "hello.pid not positive";
                break;
        case COMPUTE__SPAWNER__V1__SPAWNER_FRAME__KIND_STARTED:
                if (f->started->pid <= 0)
                        return "started.pid not positive";
                break;
        case COMPUTE__SPAWNER__V1__SPAWNER_FRAME__KIND_OUTPUT:
                if (f->output->stream != 1 && f->output->stream != 2)
                        return "output.stream is not 1 or 2";
                if (f->output->data.len == 0 || f->output->data.len > SPAWN_MAX_DATA)
                        return "output.data empty or above 64 KiB";
                break;
        case COMPUTE__SPAWNER__V1__SPAWNER_FRAME__KIND_EXITED: {
                const Compute__Spawner__V1__Exited *e = f->exited;

                if (e->exit_code < -1 || e->exit_code > 255)
                        return "exited.exit_code outside -1..255";
                if (e->signal < 0 || e->signal > SPAWN_MAX_SIGNAL)
                        return "exited.signal outside 0..64";
                if ((e->exit_code >= 0) == (e->signal > 0))
                        return "exited needs exactly one of exit_code and signal";
                if (!text_ok(e->start_error, SPAWN_MAX_START_ERROR))
                        return "exited.start_error too long or not UTF-8";
                break;
        }
        case COMPUTE__SPAWNER__V1__SPAWNER_FRAME__KIND_STDIN_CREDIT:
                if (f->stdin_credit->bytes == 0 || f->stdin_credit->bytes > SPAWN_STDIN_WINDOW)
                        return "stdin_credit.bytes outside 1..256 KiB";
                break;
        default:
                break;
        }
        return NULL;
}

static bool strings_ok(char **v, size_t n, size_t *bytes)
{
        for (size_t i = 0; i < n; i++) {
                size_t len = strlen(v[i]);

                if (!cs_utf8_valid(v[i], len))
                        return false;
                *bytes += len + 1;
        }
        return true;
}

const char *spawn_check_agent(const spawn_agent_frame *f)
{
        bool unnamed = f->kind_case == COMPUTE__SPAWNER__V1__AGENT_FRAME__KIND_PING;

        if (f->kind_case == COMPUTE__SPAWNER__V1__AGENT_FRAME__KIND__NOT_SET)
                return "frame without a kind";
        if (unnamed != (f->exec_id == 0))
                return unnamed ? "ping with an exec_id" : "exec frame without an exec_id";
        switch (f->kind_case) {
        case COMPUTE__SPAWNER__V1__AGENT_FRAME__KIND_START: {
                const Compute__Spawner__V1__Start *s = f->start;
                size_t bytes = strlen(s->cwd) + 1;

                if (s->n_argv == 0 || s->n_argv > SPAWN_MAX_ARGV || !s->argv[0][0])
                        return "start.argv empty or above 4096 entries";
                if (s->n_env > SPAWN_MAX_ENV)
                        return "start.env above its cap";
                for (size_t i = 0; i < s->n_env; i++) {
                        const char *eq = strchr(s->env[i], '=');
                        if (!eq || eq == s->env[i])
                                return "start.env entry is not K=V";
                }
                if (s->cwd[0] != '/' || strlen(s->cwd) >= SPAWN_MAX_CWD)
                        return "start.cwd not an absolute path";
                if (!strings_ok(s->argv, s->n_argv, &bytes) ||
                    !strings_ok(s->env, s->n_env, &bytes) || !cs_utf8_valid(s->cwd, strlen(s->cwd)))
                        return "start strings not UTF-8";
                if (bytes > SPAWN_MAX_START_BYTES)
                        return "start argv, env and cwd above 1 MiB";
                if (s->credit == 0 || s->credit > SPAWN_MAX_CREDIT)
                        return "start.credit outside 1..16 MiB";
                if (!s->tty && (s->rows || s->cols))
                        return "start.rows/cols without tty";
                if (s->rows > SPAWN_MAX_TTY_DIM || s->cols > SPAWN_MAX_TTY_DIM)
                        return "start.rows/cols above their cap";
                break;
        }
        case COMPUTE__SPAWNER__V1__AGENT_FRAME__KIND_STDIN:
                if (f->stdin->data.len == 0 || f->stdin->data.len > SPAWN_MAX_DATA)
                        return "stdin.data empty or above 64 KiB";
                break;
        case COMPUTE__SPAWNER__V1__AGENT_FRAME__KIND_RESIZE:
                if (f->resize->rows < 1 || f->resize->rows > SPAWN_MAX_TTY_DIM ||
                    f->resize->cols < 1 || f->resize->cols > SPAWN_MAX_TTY_DIM)
                        return "resize rows/cols outside 1..4096";
                break;
        case COMPUTE__SPAWNER__V1__AGENT_FRAME__KIND_SIGNAL:
                if (f->signal->signo < 1 || f->signal->signo > SPAWN_MAX_SIGNAL)
                        return "signal.signo outside 1..64";
                break;
        case COMPUTE__SPAWNER__V1__AGENT_FRAME__KIND_CREDIT:
                if (f->credit->bytes == 0 || f->credit->bytes > SPAWN_MAX_CREDIT)
                        return "credit.bytes outside 1..16 MiB";
                break;
        default:
                break;
        }
        return NULL;
}

/* --- decode and encode ----------------------------------------------------------------- */

/* Unknown fields are refused: both ends are built from the same source, so a field one side
 * does not know is garbage, and protobuf-c keeps (and re-encodes) fields it should have
 * refused, such as field number 0 (found by fuzz_spawn_frame). The frame's oneof member is
 * its only submessage (kind is a union of pointers: any member reads it). */
static bool has_unknown(const ProtobufCMessage *frame, const ProtobufCMessage *kind)
{
        return frame->n_unknown_fields > 0 || (kind && kind->n_unknown_fields > 0);
}

spawn_spawner_frame *spawn_decode_spawner(const uint8_t *p, size_t n, const char **why)
{
        spawn_spawner_frame *f;

        if (n > SPAWN_MAX_SPAWNER_FRAME) {
                *why = "frame larger than the protocol allows";
                return NULL;
        }
        f = compute__spawner__v1__spawner_frame__unpack(NULL, n, p);
        if (!f) {
                *why = "frame does not decode";
                return NULL;
        }
        if (has_unknown(&f->base, (const ProtobufCMessage *)f->hello)) {
                *why = "frame with unknown fields";
                spawn_spawner_frame_free(f);
                return NULL;
        }
        *why = spawn_check_spawner(f);
        if (*why) {
                spawn_spawner_frame_free(f);
                return NULL;
        }
        return f;
}

spawn_agent_frame *spawn_decode_agent(const uint8_t *p, size_t n, const char **why)
{
        spawn_agent_frame *f;

        if (n > SPAWN_MAX_AGENT_FRAME) {
                *why = "frame larger than the protocol allows";
                return NULL;
        }
        f = compute__spawner__v1__agent_frame__unpack(NULL, n, p);
        if (!f) {
                *why = "frame does not decode";
                return NULL;
        }
        if (has_unknown(&f->base, (const ProtobufCMessage *)f->start)) {
                *why = "frame with unknown fields";
                spawn_agent_frame_free(f);
                return NULL;
        }
        *why = spawn_check_agent(f);
        if (*why) {
                spawn_agent_frame_free(f);
                return NULL;
        }
        return f;
}

void spawn_spawner_frame_free(spawn_spawner_frame *f)
{
        if (f)
                compute__spawner__v1__spawner_frame__free_unpacked(f, NULL);
}

void spawn_agent_frame_free(spawn_agent_frame *f)
{
        if (f)
                compute__spawner__v1__agent_frame__free_unpacked(f, NULL);
}

static uint8_t *with_prefix(size_t len, size_t max, size_t *ret_len)
{
        uint8_t *buf;

        if (len > max)
                return NULL;
        buf = malloc(SPAWN_PREFIX + len);
        if (!buf)
                return NULL;
        buf[0] = (uint8_t)(len >> 24);
        buf[1] = (uint8_t)(len >> 16);
        buf[2] = (uint8_t)(len >> 8);
        buf[3] = (uint8_t)len;
        *ret_len = SPAWN_PREFIX + len;
        return buf;
}

uint8_t *spawn_encode_spawner(const spawn_spawner_frame *f, size_t *ret_len)
{
        size_t len = compute__spawner__v1__spawner_frame__get_packed_size(f);
        uint8_t *buf = with_prefix(len, SPAWN_MAX_SPAWNER_FRAME, ret_len);

        if (buf)
                compute__spawner__v1__spawner_frame__pack(f, buf + SPAWN_PREFIX);
        return buf;
}

uint8_t *spawn_encode_agent(const spawn_agent_frame *f, size_t *ret_len)
{
        size_t len = compute__spawner__v1__agent_frame__get_packed_size(f);
        uint8_t *buf = with_prefix(len, SPAWN_MAX_AGENT_FRAME, ret_len);

        if (buf)
                compute__spawner__v1__agent_frame__pack(f, buf + SPAWN_PREFIX);
        return buf;
}
