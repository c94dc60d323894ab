/* `compute-nodeagent image ...`: the image subcommand of the agent's executable. */
#pragma once

/* Runs `image import|list|rm ...` (argv[0] is "image"). Returns the exit status: 0, 1 on
 * failure (a message on stderr), 2 on a usage error. */
int image_main(int argc, char **argv);
