/* The spawner exec backend: see spawner_exec.h.
 *
 * Two threads per exec, as in exec.c: the caller's moves output from the exec's queue to the
 * sink and grants credit back; a terminator owns the deadline and the stop (SIGTERM, the
 * grace, SIGKILL), and never waits on the sink, which may be blocked on a client that
 * stopped reading. */
#include "spawner_exec.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "session.h"
#include "util.h"

typedef struct sp_term {
        spawn_link *l;
        spawn_exec *e;
        int64_t deadline, grace_ms;
        int64_t idle_ms;     /* 0: no idle limit */
        int64_t last_active; /* atomic: monotonic ms of the last input or output */
        bool idle;           /* atomic: the idle limit stopped it */
        int stop;            /* spawn_stop, atomic: set once */
        int last_sig;        /* atomic */
        pthread_t thread;
        bool started;
} sp_term;

static void term_signal(sp_term *t, int sig)
{
        cs_error *err = NULL;

        if (spawn_exec_signal(t->e, sig, &err) < 0)
                cs_error_free(err); /* the link broke: the exec fails by that */
        else
                __atomic_store_n(&t->last_sig, sig, __ATOMIC_SEQ_CST);
}

static void touch(sp_term *t)
{
        if (t->idle_ms > 0)
                __atomic_store_n(&t->last_active, cs_now_monotonic_ms(), __ATOMIC_SEQ_CST);
}

/* The deadline, or the idle limit's if sooner. */
static int64_t next_deadline(sp_term *t, bool *ret_idle)
{
        int64_t idle = t->idle_ms > 0
                               ? __atomic_load_n(&t->last_active, __ATOMIC_SEQ_CST) + t->idle_ms
                               : INT64_MAX;

        *ret_idle = idle < t->deadline;
        return *ret_idle ? idle : t->deadline;
}

/* Whether the exec ended by until (monotonic ms). Once the stop has begun, a poke (the
 * client going away during the grace, say) changes nothing: only the end or the time does.
 * (A poke counted as the time up broke the link under an exec that was ending, and every
 * other exec of the sandbox with it.) */
static bool wait_end(sp_term *t, int64_t until)
{
        while (!spawn_exec_wait(t->e, until))
                if (cs_now_monotonic_ms() >= until)
                        return false;
        return true;
}

static void *term_main(void *arg)
{
        sp_term *t = arg;

        for (;;) {
                bool idle;
                int64_t until = next_deadline(t, &idle);

                if (spawn_exec_wait(t->e, until))
                        return NULL;
                if (__atomic_load_n(&t->stop, __ATOMIC_SEQ_CST) != SPAWN_STOP_NONE)
                        break;
                until = next_deadline(t, &idle); /* activity may have moved it */
                if (cs_now_monotonic_ms() >= until) {
                        int none = SPAWN_STOP_NONE;
                        if (__atomic_compare_exchange_n(&t->stop, &none, SPAWN_STOP_TIMEOUT, false,
                                                        __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST) &&
                            idle)
                                __atomic_store_n(&t->idle, true, __ATOMIC_SEQ_CST);
                        break;
                }
        }
        term_signal(t, SIGTERM);
        if (wait_end(t, cs_now_monotonic_ms() + t->grace_ms))
                return NULL;
        term_signal(t, SIGKILL);
        if (!wait_end(t, cs_now_monotonic_ms() + SPAWN_KILL_SETTLE_MS))
                spawn_link_break(t->l, "the spawner did not report an exec's end after its "
                                       "SIGKILL");
        return NULL;
}

static void term_request(sp_term *t, spawn_stop why)
{
        int none = SPAWN_STOP_NONE;

        __atomic_compare_exchange_n(&t->stop, &none, why, false, __ATOMIC_SEQ_CST,
                                    __ATOMIC_SEQ_CST);
        spawn_exec_poke(t->e);
}

/* The input side of an interactive exec: the client's messages to the spawner, on a thread
 * of its own (it blocks on the client and on the stdin window). */
typedef struct sp_input {
        sp_term *t;
        const exec_input *in;
        cs_error *err; /* the client's bad message */
        pthread_t thread;
        bool started;
} sp_input;

static void *input_main(void *arg)
{
        sp_input *x = arg;
        sp_term *t = x->t;
        bool closed = false;

        for (;;) {
                exec_input_msg m;
                cs_error *err = NULL;
                int r = x->in->next(x->in->userdata, &m, &err);

                if (r < 0 && err && err->code == GRPC_STATUS_INVALID_ARGUMENT) {
                        x->err = err;
                        term_request(t, SPAWN_STOP_CANCEL);
                        return NULL;
                }
                if (r < 0) { /* the call ended: follow sees the cancel too */
                        cs_error_free(err);
                        term_request(t, SPAWN_STOP_CANCEL);
                        return NULL;
                }
                if (r == 0) {
                        /* The client can send nothing more: its half-close ends stdin too. */
                        if (!closed && spawn_exec_close_stdin(t->e, &err) < 0)
                                cs_error_free(err);
                        return NULL;
                }
                touch(t);
                switch (m.kind) {
                case SESSION_STDIN:
                        r = spawn_exec_stdin(t->e, m.data, m.len, &err);
                        touch(t); /* the command took it */
                        break;
                case SESSION_CLOSE_STDIN:
                        r = closed ? 0 : spawn_exec_close_stdin(t->e, &err);
                        closed = true;
                        break;
                case SESSION_RESIZE:
                        r = spawn_exec_resize(t->e, m.rows, m.cols, &err);
                        break;
                case SESSION_SIGNAL:
                        r = spawn_exec_signal_fg(t->e, m.signo, &err);
                        break;
                default:
                        r = 0;
                        break;
                }
                if (r < 0) /* the link broke: the exec fails by that */
                        cs_error_free(err);
        }
}

/* Moves output to the sink until the exec's end. Returns 1 (exited), -1 (failed: *why). */
static int follow(sp_term *t, const exec_sink *sink, spawn_run_result *ret, char *why,
                  size_t why_len)
{
        bool sink_ok = true;
        uint32_t owed = 0; /* delivered bytes not granted back yet */

        for (;;) {
                spawn_event ev;

                spawn_exec_next(t->e, &ev);
                switch (ev.kind) {
                case SPAWN_EV_OUTPUT: {
                        cs_error *err = NULL;

                        if (sink_ok &&
                            sink->write(sink->userdata, ev.stream, ev.data, ev.len, &err) < 0) {
                                /* The client is gone: stop the command; its output is
                                 * drained (credit keeps flowing) and dropped. */
                                sink_ok = false;
                                cs_error_free(err);
                                term_request(t, SPAWN_STOP_CANCEL);
                        }
                        owed += (uint32_t)ev.len;
                        touch(t);
                        if (owed >= SPAWN_EXEC_REGRANT) {
                                if (spawn_exec_credit(t->e, owed, &err) < 0)
                                        cs_error_free(err); /* the failure comes as an event */
                                owed = 0;
                        }
                        break;
                }
                case SPAWN_EV_EXITED:
                        ret->exited = *ev.exited;
                        return 1;
                case SPAWN_EV_FAILED:
                        snprintf(why, why_len, "%s", ev.why);
                        return -1;
                case SPAWN_EV_NONE: {
                        bool stopping =
                                __atomic_load_n(&t->stop, __ATOMIC_SEQ_CST) != SPAWN_STOP_NONE;
                        struct pollfd pf[2] = {
                                { .fd = spawn_exec_fd(t->e), .events = POLLIN },
                                { .fd = stopping ? -1 : sink->cancel_fd, .events = POLLIN },
                        };

                        if (poll(pf, 2, -1) < 0 && errno != EINTR)
                                return snprintf(why, why_len, "poll: %s", strerror(errno)), -1;
                        if (pf[1].revents)
                                term_request(t, SPAWN_STOP_CANCEL);
                        break;
                }
                }
        }
}

int spawn_run(spawn_link *l, const spawn_run_spec *spec, const exec_sink *sink,
              spawn_run_result *ret, cs_error **err)
{
        sp_term t = { .l = l, .deadline = spec->deadline, .grace_ms = spec->grace_ms };
        sp_input x = { .t = &t, .in = spec->input };
        spawn_input in = { 0 };
        char why[200] = "";
        bool sent = false;
        int r;

        *ret = (spawn_run_result){ 0 };
        if (spec->input) {
                in = (spawn_input){ .stdin = true,
                                    .tty = spec->input->tty,
                                    .rows = spec->input->rows,
                                    .cols = spec->input->cols };
                t.idle_ms = spec->input->idle_ms > 0 ? spec->input->idle_ms : 0;
                touch(&t);
        }
        if (spawn_exec_start_input(l, spec->argv, spec->env, spec->cwd, SPAWN_EXEC_WINDOW,
                                   spec->input ? &in : NULL, &t.e, &sent, err) < 0)
                return sent ? -1 : 0;
        t.started = pthread_create(&t.thread, NULL, term_main, &t) == 0;
        if (!t.started) {
                /* Without its terminator the exec could outlive its deadline: stop it now. */
                cs_error *ignored = NULL;
                if (spawn_exec_signal(t.e, SIGKILL, &ignored) < 0)
                        cs_error_free(ignored);
                spawn_link_break(l, "cannot start an exec's terminator thread");
        }
        if (spec->input && t.started) {
                x.started = pthread_create(&x.thread, NULL, input_main, &x) == 0;
                if (!x.started)
                        term_request(&t, SPAWN_STOP_CANCEL); /* no input: end it as a cancel */
        }
        r = follow(&t, sink, ret, why, sizeof(why));
        /* The input thread ends once the client's read is abandoned (its stdin writes end
         * with the exec). */
        if (x.started) {
                spec->input->abandon(spec->input->userdata);
                pthread_join(x.thread, NULL);
        }
        ret->input_err = x.err;
        ret->idle = __atomic_load_n(&t.idle, __ATOMIC_SEQ_CST);
        /* The terminator ends once the exec is done (exited or failed, both seen by now). */
        if (t.started)
                pthread_join(t.thread, NULL);
        ret->stop = (spawn_stop)__atomic_load_n(&t.stop, __ATOMIC_SEQ_CST);
        ret->last_sig = __atomic_load_n(&t.last_sig, __ATOMIC_SEQ_CST);
        spawn_exec_end(t.e);
        if (r < 0)
                return cs_error_set(err, GRPC_STATUS_UNAVAILABLE,
                                    "the sandbox's spawner went away while the command ran (%s); "
                                    "the command was stopped",
                                    why);
        return 1;
}
