/* px_time.h: monotonic clock helpers. All times in milliseconds unless the
 * name says otherwise. */
#ifndef PX_TIME_H
#define PX_TIME_H

#include <stdint.h>

/* Milliseconds on CLOCK_MONOTONIC (for deadlines). */
int64_t px_time_mono_ms(void);
/* Microseconds on CLOCK_MONOTONIC (for bounded spins). */
int64_t px_time_mono_us(void);
/* Seconds on CLOCK_MONOTONIC as a double (for rates). */
double px_time_mono_s(void);
/* Milliseconds since the Unix epoch (for timestamps stored or shown). */
int64_t px_time_wall_ms(void);

#endif
