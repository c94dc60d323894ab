/* The agent's side of compute.spawner.v1 (proto/spawner/v1/spawner.proto): one listening
 * socket per sandbox that compute-init, the sandbox's spawner, connects to, and the execs
 * multiplexed on that connection.
 *
 * One thread (epoll) accepts and reads every sandbox's connection, decodes each frame with
 * cs_spawn and routes it by exec_id to that exec's queue; the exec's own thread takes its
 * output from there (spawn_exec_next) and grants credit as it hands it on. A queue never
 * holds more than the credit the exec's thread granted: the spawner may not send beyond it.
 *
 * The sandbox is untrusted. Anything that breaks the protocol (a frame that does not decode,
 * a prefix above the maximum, a Started/Output/Exited for an exec it was not asked to run,
 * output beyond the credit, a second Hello) ends that connection: its execs fail with a
 * clear error, the reason is logged (at most once per SPAWN_LOG_INTERVAL_MS per sandbox),
 * and the sandbox has no link (callers fall back to runsc exec) until the spawner connects
 * again and says Hello. Other sandboxes never notice.
 *
 * Locking: one mutex per manager guards every endpoint, connection and exec; socket writes
 * are serialised per connection by their own mutex, taken without the manager's (a write
 * waits at most SPAWN_WRITE_TIMEOUT_MS for a spawner that stopped reading, then breaks the
 * connection). Only the manager's thread closes fds and frees endpoints and connections. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

#define SPAWN_SOCKET_NAME      "spawner.sock"
#define SPAWN_WRITE_TIMEOUT_MS 5000
#define SPAWN_LOG_INTERVAL_MS  10000
#define SPAWN_MAX_EXECS        1024 /* execs open on one connection (their entries are small) */
#define SPAWN_FIRST_CONNECT_MS 2000 /* spawn_mgr_link_wait's default */
#define SPAWN_EVENT_MAX        (256 * 1024) /* output bytes per spawn_exec_next (EXEC_CHUNK) */

typedef struct spawn_mgr spawn_mgr;
typedef struct spawn_link spawn_link;
typedef struct spawn_exec spawn_exec;

/* warn: a protocol error or a lost spawner; otherwise a connection event. key: the sandbox's. */
typedef void (*spawn_log_fn)(bool warn, const char *key, const char *msg);

/* Starts the manager's thread. */
spawn_mgr *spawn_mgr_new(spawn_log_fn log, cs_error **err);
/* Stops the thread, closes every socket (the spawners see their connection drop and kill
 * their execs) and frees everything. No exec may be open. */
void spawn_mgr_free(spawn_mgr *m);

/* Serves the sandbox `key` on dir/spawner.sock: makes dir (0700) if missing, replaces a stale
 * socket there, listens. An existing endpoint of key is replaced (its connection dropped). */
int spawn_mgr_listen(spawn_mgr *m, const char *key, const char *dir, cs_error **err);
/* Drops key's endpoint: closes its listener and connection (its execs fail); removes the
 * socket file. Nothing if there is none. */
void spawn_mgr_forget(spawn_mgr *m, const char *key);

/* Whether key has an endpoint, and whether its spawner is connected (Hello received). */
void spawn_mgr_status(spawn_mgr *m, const char *key, bool *ret_listening, bool *ret_connected);

/* The live connection of key (its spawner said Hello and broke nothing since), referenced;
 * NULL when there is none (then exec falls back to runsc exec). */
spawn_link *spawn_mgr_link(spawn_mgr *m, const char *key);
/* The same, but while key's endpoint is younger than first_ms and its spawner has never said
 * Hello, waits for that (until the endpoint is first_ms old): the first command after a
 * sandbox's start (or an agent's restart) goes through the spawner that is about to connect,
 * not through runsc exec. An endpoint whose spawner never connects costs no wait later. */
spawn_link *spawn_mgr_link_wait(spawn_mgr *m, const char *key, int64_t first_ms);
void spawn_link_unref(spawn_link *l);
/* Ends the connection as broken (e.g. a spawner that does not end an exec after SIGKILL). */
void spawn_link_break(spawn_link *l, const char *why);

/* Sends a Start. Returns 0 with *ret; -1 with *err, and *ret_sent telling whether any byte of
 * the Start may have reached the spawner (if not, nothing ran: the caller may use another
 * path). The exec keeps a reference to the link until spawn_exec_end. */
int spawn_exec_start(spawn_link *l, char *const *argv, char *const *env, const char *cwd,
                     uint32_t credit, spawn_exec **ret, bool *ret_sent, cs_error **err);

/* An interactive exec (Start.stdin/tty): a stdin the agent feeds (spawn_exec_stdin), or a
 * terminal of rows x cols (0x0: its default) for stdin, stdout and stderr. */
typedef struct spawn_input {
        bool stdin, tty;
        uint32_t rows, cols;
} spawn_input;

/* spawn_exec_start for an interactive exec (in NULL: as spawn_exec_start). */
int spawn_exec_start_input(spawn_link *l, char *const *argv, char *const *env, const char *cwd,
                           uint32_t credit, const spawn_input *in, spawn_exec **ret, bool *ret_sent,
                           cs_error **err);

/* Interactive execs. spawn_exec_stdin sends data in frames within the stdin window the
 * spawner grants back as the command reads: it blocks while the window is used up (the
 * command is not reading), until the exec is done. 0 when all was sent, 1 when the exec is
 * done (the rest is dropped), -1 when the link broke. close_stdin, resize and the foreground
 * signal (tty execs: to the terminal's foreground process group; others: the tree) do
 * nothing once the exec is done. */
int spawn_exec_stdin(spawn_exec *e, const uint8_t *data, size_t len, cs_error **err);
int spawn_exec_close_stdin(spawn_exec *e, cs_error **err);
int spawn_exec_resize(spawn_exec *e, uint32_t rows, uint32_t cols, cs_error **err);
int spawn_exec_signal_fg(spawn_exec *e, int signo, cs_error **err);

typedef enum spawn_event_kind {
        SPAWN_EV_NONE,   /* nothing yet: wait for spawn_exec_fd */
        SPAWN_EV_OUTPUT, /* stream, data, len: valid until the next call */
        SPAWN_EV_EXITED, /* the exec's end: exited */
        SPAWN_EV_FAILED, /* the connection broke before the end: why */
} spawn_event_kind;

typedef struct spawn_exited {
        int exit_code; /* 0..255, or -1 when signalled */
        int signal;
        bool core_dumped;
        uint64_t user_us, system_us, max_rss_kib;
        char start_error[257]; /* "" unless the command never started */
} spawn_exited;

typedef struct spawn_event {
        spawn_event_kind kind;
        int stream; /* 1 stdout, 2 stderr */
        const uint8_t *data;
        size_t len;
        const spawn_exited *exited;
        const char *why;
} spawn_event;

/* Readable while the exec has an event for spawn_exec_next (an eventfd). */
int spawn_exec_fd(spawn_exec *e);
/* The next event, in the order the spawner sent them. Output is released by the next call. */
void spawn_exec_next(spawn_exec *e, spawn_event *ev);
/* The Started pid, 0 until then. */
int spawn_exec_pid(spawn_exec *e);
/* Whether the exec has ended (Exited came, or the connection broke). */
bool spawn_exec_done(spawn_exec *e);
/* Waits until the exec is done or until_ms (monotonic) passes or spawn_exec_poke; returns
 * spawn_exec_done. */
bool spawn_exec_wait(spawn_exec *e, int64_t until_ms);
/* Wakes spawn_exec_wait (a stop request). */
void spawn_exec_poke(spawn_exec *e);
/* Grants bytes more of output (a Credit). -1 when the connection broke. */
int spawn_exec_credit(spawn_exec *e, uint32_t bytes, cs_error **err);
/* Signals the exec's tree. Nothing once the exec is done (the spawner has forgotten it). */
int spawn_exec_signal(spawn_exec *e, int signo, cs_error **err);
/* The caller is done with e. An exec that has not ended stays known to the connection (its
 * late frames are taken and dropped) until its Exited or the connection's end. */
void spawn_exec_end(spawn_exec *e);

/* Bytes queued for e now (tests: never above the credit granted). */
size_t spawn_exec_queued(spawn_exec *e);
