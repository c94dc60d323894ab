/* Files for unit-test fixtures: each helper fails the running cmocka test on error. */
#pragma once

/* Creates or truncates path (mode 0600) and writes text to it. */
void testfs_put(const char *path, const char *text);
/* mkdir path (mode 0700); an existing directory is fine. */
void testfs_mkdir(const char *path);
