/* px_check.h: the C tests' soft assertion. CHECK(cond, fmt, ...) prints
 * "FAIL file:line: message" to stderr and counts the failure in the
 * including file's `fails` (static: one counter per test program); the
 * test goes on and returns non-zero at the end when fails > 0. Include it
 * once, from a test's .c file, before the first CHECK. */
#ifndef PX_TESTS_CHECK_H
#define PX_TESTS_CHECK_H

#include <stdio.h>

static int fails;

#define CHECK(cond, ...)                                                                       \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                               \
            fprintf(stderr, __VA_ARGS__);                                                      \
            fprintf(stderr, "\n");                                                             \
            fails++;                                                                           \
        }                                                                                      \
    } while (0)

#endif
