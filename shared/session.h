/* ExecSession's message sequence (docs/api.md "ExecSession"), checked the same way by the
 * frontend (on the client's stream) and the node agent (on the frontend's, which it does not
 * trust): pure, no protobuf, so both map their own generated types onto it.
 *
 * Rules: the first message is start and there is one; resize only with a terminal; a signal
 * number in 1..SESSION_MAX_SIGNAL; no stdin after close_stdin (a second close_stdin is
 * harmless); stdin chunks of 1..SESSION_MAX_STDIN_CHUNK bytes (an empty one is ignored);
 * terminal sides of 1..SESSION_MAX_TTY_DIM (the start's size may be 0x0: the default). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SESSION_MAX_STDIN_CHUNK (64 * 1024)
#define SESSION_MAX_TTY_DIM     4096
#define SESSION_MAX_SIGNAL      64
#define SESSION_DEFAULT_ROWS    24
#define SESSION_DEFAULT_COLS    80

typedef enum session_kind {
        SESSION_NONE, /* a message with no kind set */
        SESSION_START,
        SESSION_STDIN,
        SESSION_CLOSE_STDIN,
        SESSION_RESIZE,
        SESSION_SIGNAL,
} session_kind;

typedef struct session_state {
        bool started, tty, stdin_closed;
} session_state;

typedef struct session_msg {
        session_kind kind;
        size_t stdin_len;
        bool tty;            /* start */
        bool has_size;       /* start: a size was given; resize: always */
        uint32_t rows, cols; /* start (size) and resize */
        int32_t signo;       /* signal */
} session_msg;

/* Checks m against the state so far and updates it. NULL when m is fine, else a message for
 * INVALID_ARGUMENT (static). */
static inline const char *session_check(session_state *s, const session_msg *m)
{
        if (!s->started && m->kind != SESSION_START)
                return "the first message of an ExecSession must be start";
        switch (m->kind) {
        case SESSION_NONE:
                return "an ExecSession message with none of start, stdin, close_stdin, resize "
                       "or signal set";
        case SESSION_START:
                if (s->started)
                        return "a second start in one ExecSession";
                if (m->has_size && !m->tty && (m->rows || m->cols))
                        return "start.size is for terminal sessions (tty) only";
                if (m->rows > SESSION_MAX_TTY_DIM || m->cols > SESSION_MAX_TTY_DIM)
                        return "start.size: rows and cols must be at most 4096";
                s->started = true;
                s->tty = m->tty;
                return NULL;
        case SESSION_STDIN:
                if (s->stdin_closed)
                        return "stdin after close_stdin";
                if (m->stdin_len > SESSION_MAX_STDIN_CHUNK)
                        return "a stdin message carries at most 65536 bytes: split larger input";
                return NULL;
        case SESSION_CLOSE_STDIN:
                s->stdin_closed = true;
                return NULL;
        case SESSION_RESIZE:
                if (!s->tty)
                        return "resize in a session without a terminal (start.tty is false)";
                if (m->rows < 1 || m->cols < 1 || m->rows > SESSION_MAX_TTY_DIM ||
                    m->cols > SESSION_MAX_TTY_DIM)
                        return "resize: rows and cols must be 1..4096";
                return NULL;
        case SESSION_SIGNAL:
                if (m->signo < 1 || m->signo > SESSION_MAX_SIGNAL)
                        return "signal: not a signal number (1..64)";
                return NULL;
        }
        return "an unknown ExecSession message";
}
