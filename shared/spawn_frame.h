/* compute.spawner.v1 frames (proto/spawner/v1/spawner.proto): the length-prefixed protobuf
 * messages between the node agent and compute-init, the in-sandbox spawner.
 *
 * Linked into both sides, one of which is a static binary inside the sandbox: this code
 * depends on protobuf-c and libc only (no gRPC, no cs_error).
 *
 * Bounds: a reader never holds more than one frame (at most its max_frame bytes) plus the
 * 4-byte prefix; a prefix above max_frame is a protocol error, not an allocation. The
 * decoders check every field against the ranges spawner.proto documents and name the first
 * one that is wrong. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "spawner/v1/spawner.pb-c.h"

typedef Compute__Spawner__V1__AgentFrame spawn_agent_frame;
typedef Compute__Spawner__V1__SpawnerFrame spawn_spawner_frame;

#define SPAWN_PROTOCOL 1
#define SPAWN_PREFIX   4
/* Output data per frame, and the largest frame the spawner may send. */
#define SPAWN_MAX_DATA          (64 * 1024)
#define SPAWN_MAX_SPAWNER_FRAME (SPAWN_MAX_DATA + 1024)
/* The largest frame the agent may send: a Start with the API's argv/env cap (1 MiB, checked
 * by the agent first) and the encoding's overhead of every one of its 5120 strings. */
#define SPAWN_MAX_START_BYTES (1 << 20)
#define SPAWN_MAX_AGENT_FRAME (SPAWN_MAX_START_BYTES + 64 * 1024)
#define SPAWN_MAX_ARGV        4096
#define SPAWN_MAX_ENV         1280 /* the API's 1024 plus the agent's base variables */
#define SPAWN_MAX_CWD         4096
#define SPAWN_MAX_CREDIT      (16u << 20)
#define SPAWN_MAX_VERSION     64
#define SPAWN_MAX_START_ERROR 256
#define SPAWN_MAX_SIGNAL      64
/* Stdin bytes the agent may send an exec beyond what the spawner granted back (the
 * spawner's buffer for that exec), and a terminal's largest side. */
#define SPAWN_STDIN_WINDOW (256u * 1024)
#define SPAWN_MAX_TTY_DIM  4096

/* Accumulates bytes of a stream and cuts them into frames. */
typedef struct spawn_reader {
        uint8_t *buf;
        size_t len, cap;
        size_t max_frame;
        size_t consumed; /* bytes of buf already returned as frames */
} spawn_reader;

void spawn_reader_init(spawn_reader *r, size_t max_frame);
void spawn_reader_free(spawn_reader *r);

/* One read(2) from fd into r: what the frame being read still needs, or up to 4 KiB of
 * small frames. Call spawn_reader_next until it returns 0 first: while a whole frame (or a
 * bad prefix) waits, this reads nothing and fails with EAGAIN. Returns the bytes read, 0 at
 * EOF, -1 with errno set (EAGAIN also on a non-blocking fd with nothing to read). */
ssize_t spawn_reader_fill(spawn_reader *r, int fd);

/* The next whole frame: 1 with its payload in *ret and *ret_len (valid until the next call on
 * r), 0 when none is complete yet, -1 when the prefix announces more than max_frame bytes
 * (*why says so; the stream cannot be resynchronised: close it). */
int spawn_reader_next(spawn_reader *r, const uint8_t **ret, size_t *ret_len, const char **why);

/* Unpacks and checks a frame. NULL with *why (a static string) when the bytes do not
 * decode, carry a field this protocol does not define, or a field is out of its range. Free
 * with spawn_*_frame_free. */
spawn_spawner_frame *spawn_decode_spawner(const uint8_t *p, size_t n, const char **why);
spawn_agent_frame *spawn_decode_agent(const uint8_t *p, size_t n, const char **why);
void spawn_spawner_frame_free(spawn_spawner_frame *f);
void spawn_agent_frame_free(spawn_agent_frame *f);

/* Packs a frame with its prefix into a malloc'd buffer (*ret_len bytes); NULL when it would
 * exceed the direction's maximum frame or memory is short. */
uint8_t *spawn_encode_spawner(const spawn_spawner_frame *f, size_t *ret_len);
uint8_t *spawn_encode_agent(const spawn_agent_frame *f, size_t *ret_len);

/* Checks of the decoders, for frames built in memory (NULL when f is valid). */
const char *spawn_check_spawner(const spawn_spawner_frame *f);
const char *spawn_check_agent(const spawn_agent_frame *f);
