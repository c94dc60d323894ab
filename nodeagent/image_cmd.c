/* `compute-nodeagent image import|list|rm`: the command line over image.h, run on the node
 * (as root) to fill the images directory the agent's local mode takes root filesystems from.
 * Prints results on stdout and one error line on stderr; exit 0, 1 (failure), 2 (usage). */
#include "image_cmd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agent_defaults.h"
#include "image.h"
#include "util.h"

#define PROG "compute-nodeagent image"

static const char usage_text[] =
        "Usage: compute-nodeagent image import [--images-dir DIR] SOURCE NAME\n"
        "       compute-nodeagent image list [--images-dir DIR]\n"
        "       compute-nodeagent image rm [--images-dir DIR] NAME\n"
        "\n"
        "Manages the images of the agent's local mode: image NAME is the directory\n"
        "DIR/NAME, the root filesystem a sandbox of that image runs on (never written:\n"
        "a sandbox's writes to its root stay in its memory).\n"
        "\n"
        "import  Builds DIR/NAME from SOURCE: an OCI image layout directory, or a tarball\n"
        "        (docker save, or a tar of an OCI layout; gzip, zstd, xz, bzip2, lz4 or\n"
        "        none). Layers are applied with their whiteouts, owners, modes and times;\n"
        "        device nodes are skipped (the sandbox has its own /dev). Hostile input is\n"
        "        refused: paths with '..' or through a symlink, blobs that do not match\n"
        "        their digest, more than 8 GiB or 1,000,000 entries. The image appears\n"
        "        whole or not at all; an existing NAME is never replaced.\n"
        "list    Prints each image's name and when it was imported (UTC).\n"
        "rm      Removes an image (sandboxes already running from it are not stopped).\n"
        "\n"
        "NAME: 1..255 of [A-Za-z0-9._:-], not starting with '.' (e.g. busybox:1.36).\n"
        "--images-dir DIR: default $COMPUTE_IMAGES_DIR, else $COMPUTE_STATE_DIR/images,\n"
        "        else /var/lib/compute/images (the agent's defaults).\n"
        "Exit status: 0 success, 1 failure, 2 usage error.\n";

static int usage_error(const char *msg)
{
        fprintf(stderr, "%s: %s\n%s", PROG, msg, usage_text);
        return 2;
}

static int fail(cs_error *err)
{
        fprintf(stderr, "%s: %s\n", PROG, err->msg);
        cs_error_free(err);
        return 1;
}

/* The agent's images directory when --images-dir is not given. *ret_owned is what to free. */
static const char *images_dir_default(char **ret_owned)
{
        const char *dir = getenv("COMPUTE_IMAGES_DIR"), *state = getenv("COMPUTE_STATE_DIR");

        *ret_owned = NULL;
        if (dir && dir[0])
                return dir;
        *ret_owned = cs_xasprintf("%s/images", state && state[0] ? state : NA_STATE_DIR_DEFAULT);
        return *ret_owned;
}

static int cmd_import(const char *dir, char **args, int n)
{
        cs_error *err = NULL;
        image_stats st;
        int64_t t0 = cs_now_monotonic_ms(), ms;

        if (n != 2)
                return usage_error("import takes SOURCE and NAME");
        if (!image_name_valid(args[1]))
                return usage_error("NAME must be 1..255 of [A-Za-z0-9._:-], not starting "
                                   "with '.'");
        if (image_import(dir, args[0], args[1], &st, &err) < 0)
                return fail(err);
        ms = cs_now_monotonic_ms() - t0;
        printf("imported %s: %u layer%s, %llu files, %.1f MiB in ", args[1], st.layers,
               st.layers == 1 ? "" : "s", (unsigned long long)st.files,
               (double)st.bytes / (1 << 20));
        if (ms < 1000)
                printf("%lld ms", (long long)ms);
        else
                printf("%.1f s", (double)ms / 1000);
        if (st.devices_skipped)
                printf(" (%llu device node%s skipped)", (unsigned long long)st.devices_skipped,
                       st.devices_skipped == 1 ? "" : "s");
        printf("\n");
        return 0;
}

static int cmd_list(const char *dir, int n)
{
        cs_error *err = NULL;
        image_info *infos;
        size_t count;

        if (n != 0)
                return usage_error("list takes no arguments");
        if (image_list(dir, &infos, &count, &err) < 0)
                return fail(err);
        for (size_t i = 0; i < count; i++) {
                time_t t = (time_t)(infos[i].imported_at_ms / 1000);
                struct tm tm;
                char when[32];

                gmtime_r(&t, &tm);
                strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
                printf("%-40s  %s\n", infos[i].name, when);
        }
        image_infos_free(infos, count);
        return 0;
}

static int cmd_rm(const char *dir, char **args, int n)
{
        cs_error *err = NULL;

        if (n != 1)
                return usage_error("rm takes NAME");
        if (image_remove(dir, args[0], &err) < 0)
                return fail(err);
        printf("removed %s\n", args[0]);
        return 0;
}

int image_main(int argc, char **argv)
{
        _cleanup_free_ char *owned = NULL;
        _cleanup_free_ char **args = cs_xcalloc((size_t)argc, sizeof(*args));
        const char *cmd = NULL, *dir = NULL;
        bool options = true;
        int n = 0;

        for (int i = 1; i < argc; i++) {
                const char *a = argv[i];

                if (options && (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)) {
                        fputs(usage_text, stdout);
                        return 0;
                } else if (options && strcmp(a, "--") == 0) {
                        options = false;
                } else if (options && strcmp(a, "--images-dir") == 0) {
                        if (++i == argc)
                                return usage_error("--images-dir needs a directory");
                        dir = argv[i];
                } else if (options && strncmp(a, "--images-dir=", 13) == 0) {
                        dir = a + 13;
                } else if (options && a[0] == '-' && a[1]) {
                        fprintf(stderr, "%s: unknown option %s\n%s", PROG, a, usage_text);
                        return 2;
                } else if (!cmd) {
                        cmd = a;
                } else {
                        args[n++] = argv[i];
                }
        }
        if (dir && !dir[0])
                return usage_error("--images-dir is empty");
        if (!dir)
                dir = images_dir_default(&owned);
        if (!cmd)
                return usage_error("no command given");
        if (strcmp(cmd, "import") == 0)
                return cmd_import(dir, args, n);
        if (strcmp(cmd, "list") == 0 || strcmp(cmd, "ls") == 0)
                return cmd_list(dir, n);
        if (strcmp(cmd, "rm") == 0 || strcmp(cmd, "remove") == 0)
                return cmd_rm(dir, args, n);
        fprintf(stderr, "%s: unknown command '%s'\n%s", PROG, cmd, usage_text);
        return 2;
}
