/* px_env.h: the PX_* environment knobs, read in one place and cached.
 *
 * Every knob is documented in px_env.c's table and printed by
 * `parallaxd --print-config` through px_env_print(). Read a knob with the
 * typed getters; unknown names are a programming error (abort in debug). */
#ifndef PX_ENV_H
#define PX_ENV_H

#include <stdio.h>

/* Integer knob value (environment if set and valid, else the default). */
long px_env_int(const char *name);
/* String knob value, never NULL (default may be ""). Borrowed, static. */
const char *px_env_str(const char *name);
/* Writes "NAME=value  # doc" for every knob to `out`. */
void px_env_print(FILE *out);

#endif
