/* The syscall allowlist a daemon installs once it has started (libseccomp). Each program keeps
 * its list in one table of syscall names (frontend/seccomp_frontend.c,
 * nodeagent/seccomp_agent.c); docs/security.md says how to extend them. */
#pragma once

#include "error.h"

/* The programs' tables: NULL-terminated lists of syscall names (as strace names them). */
extern const char *const frontend_seccomp_allow[];
extern const char *const agent_seccomp_allow[];

/* Installs, on every thread of the process (TSYNC) and with no_new_privs, a filter that
 * allows the syscalls of `allow` and refuses every other: the call fails with EPERM and a
 * line "<program>: seccomp refused syscall N (name)" is written to stderr (a SIGSYS handler;
 * on architectures other than x86_64 and aarch64 the call just fails with EPERM). Children
 * inherit the filter across fork and execve (the handler is reset to SIG_DFL by execve, so a
 * refused call kills them). A name unknown to libseccomp is skipped (syscalls of another
 * architecture); -1 with *err when the filter cannot be built or loaded. `program` is
 * borrowed for the life of the process. */
int cs_seccomp_install(const char *program, const char *const *allow, cs_error **err);

/* The same filter, but a call off the list is allowed and logged by the kernel (audit record
 * type 1326 in the kernel log, `dmesg`; rate-limited): how a list is extended for what
 * strace cannot follow (runsc's sandbox). For debugging only. */
int cs_seccomp_install_logging(const char *program, const char *const *allow, cs_error **err);

/* 1 when the calling thread runs under a seccomp filter (/proc/self/status "Seccomp: 2"). */
int cs_seccomp_active(void);
