/* px_sha256.h: SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), for the
 * per-job secret that ranks prove to each other (px_bootstrap.c) without
 * sending it. Small and dependency-free (common/ uses only libc); not meant
 * for bulk data. Pure code, any thread. */
#ifndef PX_SHA256_H
#define PX_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define PX_SHA256_BYTES 32

/* out = SHA-256(data[0 .. len)). */
void px_sha256(const void *data, size_t len, uint8_t out[PX_SHA256_BYTES]);

/* out = HMAC-SHA256(key, msg) (RFC 2104; any key length, 0 included). */
void px_hmac_sha256(const void *key, size_t key_len, const void *msg, size_t msg_len,
                    uint8_t out[PX_SHA256_BYTES]);

/* 1 when a and b (len bytes each) are equal, in time that does not depend
 * on where they differ; else 0. */
int px_secret_equal(const void *a, const void *b, size_t len);

#endif
