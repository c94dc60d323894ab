/* Fuzz target: the compute.spawner.v1 frame reader and decoders (shared/spawn_frame.c), which
 * read what a hostile sandbox's compute-init (or a half-trusted agent) sends.
 *
 * Input: byte 0 picks the direction (even: agent frames, read as compute-init reads them;
 * odd: spawner frames, as the agent does) and byte 1 the size of the writes that feed the
 * stream to the reader through a socketpair (1..256 bytes, so that frames arrive cut at every
 * place); the rest is the stream.
 *
 * Beyond "no crash, no leak": the reader never holds more than the largest frame plus its
 * prefix, never returns a frame above it, and returns frames whose prefixes and payloads add
 * up to no more than what was written; a frame that decodes passes the checks, encodes again,
 * and that encoding decodes to the same kind and exec_id.
 *
 * Owns: this file and corpus/spawn_frame/. Touches nothing outside the process. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "spawn_frame.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_agent(const uint8_t *p, size_t n)
{
        const char *why = NULL, *why2 = NULL;
        spawn_agent_frame *f = spawn_decode_agent(p, n, &why), *g;
        uint8_t *buf;
        size_t len;

        if (!f) {
                if (!why)
                        abort();
                return;
        }
        if (spawn_check_agent(f))
                abort();
        buf = spawn_encode_agent(f, &len);
        if (!buf)
                abort(); /* what decoded within the size encodes within it */
        g = spawn_decode_agent(buf + SPAWN_PREFIX, len - SPAWN_PREFIX, &why2);
        if (!g || g->kind_case != f->kind_case || g->exec_id != f->exec_id)
                abort();
        spawn_agent_frame_free(g);
        spawn_agent_frame_free(f);
        free(buf);
}

static void check_spawner(const uint8_t *p, size_t n)
{
        const char *why = NULL, *why2 = NULL;
        spawn_spawner_frame *f = spawn_decode_spawner(p, n, &why), *g;
        uint8_t *buf;
        size_t len;

        if (!f) {
                if (!why)
                        abort();
                return;
        }
        if (spawn_check_spawner(f))
                abort();
        buf = spawn_encode_spawner(f, &len);
        if (!buf)
                abort();
        g = spawn_decode_spawner(buf + SPAWN_PREFIX, len - SPAWN_PREFIX, &why2);
        if (!g || g->kind_case != f->kind_case || g->exec_id != f->exec_id)
                abort();
        spawn_spawner_frame_free(g);
        spawn_spawner_frame_free(f);
        free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        bool agent;
        size_t chunk, sent = 0, returned = 0, max;
        spawn_reader r;
        int fds[2];
        bool eof = false;

        if (size < 2)
                return 0;
        agent = (data[0] & 1) == 0;
        chunk = (size_t)data[1] + 1;
        data += 2;
        size -= 2;
        max = agent ? SPAWN_MAX_AGENT_FRAME : SPAWN_MAX_SPAWNER_FRAME;
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) < 0)
                abort();
        fcntl(fds[0], F_SETFL, O_NONBLOCK);
        spawn_reader_init(&r, max);
        for (;;) {
                const uint8_t *p;
                const char *why = NULL;
                size_t n;
                ssize_t got;
                int k;

                if (sent < size) {
                        size_t w = size - sent < chunk ? size - sent : chunk;
                        ssize_t wr = write(fds[1], data + sent, w);

                        if (wr < 0)
                                abort();
                        sent += (size_t)wr;
                } else if (!eof) {
                        close(fds[1]);
                        eof = true;
                }
                while ((k = spawn_reader_next(&r, &p, &n, &why)) == 1) {
                        if (n > max)
                                abort();
                        returned += SPAWN_PREFIX + n;
                        if (returned > sent)
                                abort();
                        if (agent)
                                check_agent(p, n);
                        else
                                check_spawner(p, n);
                }
                if (k < 0) {
                        if (!why)
                                abort();
                        break; /* a bad prefix: the stream ends here */
                }
                got = spawn_reader_fill(&r, fds[0]);
                if (r.cap > max + SPAWN_PREFIX)
                        abort();
                if (got == 0)
                        break;
                if (got < 0 && errno != EAGAIN)
                        abort();
                if (got < 0 && eof)
                        break;
        }
        spawn_reader_free(&r);
        close(fds[0]);
        if (!eof)
                close(fds[1]);
        return 0;
}
