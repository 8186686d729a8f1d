/* test_wait_policy.c: the auto spin's back-off of shared-memory waits
 * (px__spin_backoff_try / px__spin_backoff_note, px_shm.h) fed synthetic
 * spin outcomes: a fresh state spins; a miss skips the next 16 waits,
 * every further miss doubles the skip up to 1024, and a hit resets it; a
 * machine where the spin always misses spins on fewer than 1% of its waits
 * (measured: the 50 us spin that the peer's shared core made miss every
 * time cost 4 KiB all-to-all 20x). Pure: no ranks, no clock. */
#include <stdio.h>
#include <stdlib.h>

#include "px_shm.h"

#include "../px_check.h"

/* Waits that px__spin_backoff_try refuses before it allows one again. */
static unsigned skipped_before_spin(px__spin_backoff_t *b)
{
    unsigned n = 0;
    while (!px__spin_backoff_try(b) && n < 100000)
        n++;
    return n;
}

int main(void)
{
    px__spin_backoff_t b = {0, 0};
    unsigned expect = PX__SPIN_BACKOFF_MIN, spins = 0, waits = 0;

    CHECK(px__spin_backoff_try(&b) == 1, "a fresh state must spin");
    CHECK(px__spin_backoff_try(&b) == 1, "hits or nothing noted: it keeps spinning");

    /* misses in a row: 16, 32, ... 1024, 1024 */
    for (int miss = 0; miss < 10; miss++) {
        unsigned got;
        px__spin_backoff_note(&b, 0);
        got = skipped_before_spin(&b);
        CHECK(got == expect, "miss %d: skipped %u waits, want %u", miss + 1, got, expect);
        expect = expect * 2 > PX__SPIN_BACKOFF_MAX ? PX__SPIN_BACKOFF_MAX : expect * 2;
    }
    CHECK(expect == PX__SPIN_BACKOFF_MAX, "the skip stops at %u", PX__SPIN_BACKOFF_MAX);

    /* a hit resets the skip: the next miss skips the minimum again */
    px__spin_backoff_note(&b, 1);
    CHECK(px__spin_backoff_try(&b) == 1, "after a hit it spins");
    px__spin_backoff_note(&b, 0);
    CHECK(skipped_before_spin(&b) == PX__SPIN_BACKOFF_MIN, "after hit then miss: skip %u",
          PX__SPIN_BACKOFF_MIN);

    /* always missing: the share of waits that spin falls below 1% */
    b = (px__spin_backoff_t){0, 0};
    for (waits = 0; waits < 100000; waits++)
        if (px__spin_backoff_try(&b)) {
            spins++;
            px__spin_backoff_note(&b, 0);
        }
    CHECK(spins * 100 < waits, "always missing: %u spins in %u waits", spins, waits);

    /* always hitting: every wait spins */
    b = (px__spin_backoff_t){0, 0};
    spins = 0;
    for (waits = 0; waits < 1000; waits++)
        if (px__spin_backoff_try(&b)) {
            spins++;
            px__spin_backoff_note(&b, 1);
        }
    CHECK(spins == waits, "always hitting: %u spins in %u waits", spins, waits);

    if (fails) {
        fprintf(stderr, "test_wait_policy: %d failure(s)\n", fails);
        return 1;
    }
    printf("test_wait_policy: ok\n");
    return 0;
}
