/* test_secret.c: SHA-256 and HMAC-SHA256 (common/px_sha256.h), which the
 * bootstrap's job-secret proof rests on, against the published vectors:
 * FIPS 180-4's examples (NIST CSRC "SHA256.pdf": "abc", the 448-bit
 * message, a million 'a's) and RFC 4231's HMAC-SHA256 cases 1, 2 and 6 (a
 * key longer than the block). Plus px_secret_equal. Pure, unit. */
#include <stdlib.h>
#include <string.h>

#include "px_sha256.h"
#include "../px_check.h"

static void hex(const uint8_t *d, char *out)
{
    for (int i = 0; i < PX_SHA256_BYTES; i++)
        sprintf(out + 2 * i, "%02x", d[i]);
}

static void sha(const void *m, size_t n, const char *want)
{
    uint8_t d[PX_SHA256_BYTES];
    char h[2 * PX_SHA256_BYTES + 1];
    px_sha256(m, n, d);
    hex(d, h);
    CHECK(!strcmp(h, want), "sha256 of %zu bytes: %s, want %s", n, h, want);
}

static void mac(const void *k, size_t kn, const void *m, size_t mn, const char *want)
{
    uint8_t d[PX_SHA256_BYTES];
    char h[2 * PX_SHA256_BYTES + 1];
    px_hmac_sha256(k, kn, m, mn, d);
    hex(d, h);
    CHECK(!strcmp(h, want), "hmac (key %zu bytes, msg %zu bytes): %s, want %s", kn, mn, h, want);
}

int main(void)
{
    char *million = malloc(1000000);
    uint8_t key6[131];

    sha("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    sha("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    sha("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 56,
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    if (million) {
        memset(million, 'a', 1000000);
        sha(million, 1000000, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
        free(million);
    }
    {
        uint8_t key1[20];
        memset(key1, 0x0b, sizeof(key1));
        mac(key1, sizeof(key1), "Hi There", 8,
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
    }
    mac("Jefe", 4, "what do ya want for nothing?", 28,
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    memset(key6, 0xaa, sizeof(key6));
    mac(key6, sizeof(key6), "Test Using Larger Than Block-Size Key - Hash Key First", 54,
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
    CHECK(px_secret_equal("abcd", "abcd", 4) == 1, "equal secrets differ");
    CHECK(px_secret_equal("abcd", "abce", 4) == 0, "different secrets equal");
    CHECK(px_secret_equal("", "", 0) == 1, "empty secrets differ");
    if (!fails)
        printf("PASS\n");
    return fails ? 1 : 0;
}
