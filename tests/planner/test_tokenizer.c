/* test_tokenizer.c: the byte-level BPE module (planner/tokenizer.h) on
 * tokenizers written here with known merges, and two modes that
 * test_tokenizer_hf.py runs on tokenizers trained by Hugging Face's
 * `tokenizers`.
 *
 * Usage: test_tokenizer unit
 *        test_tokenizer roundtrip TOKENIZER.json TEXT  decode(encode(text)) == text
 *        test_tokenizer chunks TOKENIZER.json TEXT     the text cut into several chunks
 *                                                      (px_tokenizer_chunk_end) encodes
 *                                                      to the ids of the whole
 * Writes scratch files under $TMPDIR (or /tmp). */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tokenizer.h"

#include "../px_check.h"

static char tmpdir[512];

/* GPT-2's bytes_to_unicode (openai/gpt-2 encoder.py): byte -> UTF-8 of its
 * ByteLevel character, the reference the module's inverse is checked by */
static void byte_char(unsigned b, char out[3])
{
    unsigned cp, n = 0;
    int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    if (printable) {
        cp = b;
    } else {
        for (unsigned c = 0; c < b; c++)
            if (!((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE))
                n++;
        cp = 256 + n;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = 0;
    } else {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        out[2] = 0;
    }
}

/* A tokenizer: ids 0..255 the bytes, then one id per merge (in order),
 * then "<|endoftext|>"; `pre` the pre_tokenizer (stolen). */
static json_t *make_tokenizer(const char *const *merges, int nmerges, json_t *pre)
{
    json_t *vocab = json_object(), *mlist = json_array(), *added = json_array();
    char c[3];
    for (unsigned b = 0; b < 256; b++) {
        byte_char(b, c);
        json_object_set_new(vocab, c, json_integer(b));
    }
    for (int i = 0; i < nmerges; i++) {
        char merged[64];
        const char *sp = strchr(merges[i], ' ');
        snprintf(merged, sizeof(merged), "%.*s%s", (int)(sp - merges[i]), merges[i], sp + 1);
        json_object_set_new(vocab, merged, json_integer(256 + i));
        json_array_append_new(mlist, json_string(merges[i]));
    }
    json_array_append_new(added, json_pack("{s:i, s:s, s:b, s:b, s:b, s:b, s:b}", "id",
                                           256 + nmerges, "content", "<|endoftext|>",
                                           "single_word", 0, "lstrip", 0, "rstrip", 0,
                                           "normalized", 0, "special", 1));
    return json_pack("{s:s, s:o, s:n, s:o, s:n, s:{s:s}, s:{s:s, s:n, s:n, s:o, s:o}}",
                     "version", "1.0", "added_tokens", added, "normalizer", "pre_tokenizer",
                     pre, "post_processor", "decoder", "type", "ByteLevel", "model", "type",
                     "BPE", "dropout", "unk_token", "vocab", vocab, "merges", mlist);
}

static json_t *bytelevel(int use_regex)
{
    return json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", 0,
                     "trim_offsets", 1, "use_regex", use_regex);
}

static px_status_t load_json(json_t *j, const char *name, char *err, size_t errlen,
                             px_tokenizer_t **tok_p)
{
    char path[700];
    snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
    json_dump_file(j, path, 0);
    json_decref(j);
    return px_tokenizer_load(path, err, errlen, tok_p);
}

static int ids_equal(const px_token_ids_t *got, const uint32_t *want, size_t n)
{
    return got->len == n && !memcmp(got->ids, want, n * sizeof(*want));
}

static void encode_check(px_tokenizer_t *tok, const char *text, const uint32_t *want, size_t n)
{
    px_token_ids_t ids = {0};
    char err[256] = "";
    px_status_t st = px_tokenizer_encode(tok, text, strlen(text), &ids, err, sizeof(err));
    CHECK(st == PX_OK && ids_equal(&ids, want, n), "encode '%s': status %d (%s), %zu ids",
          text, st, err, ids.len);
    for (size_t i = 0; st == PX_OK && i < ids.len && !ids_equal(&ids, want, n); i++)
        fprintf(stderr, "  id %zu: %u (want %u)\n", i, ids.ids[i], i < n ? want[i] : 0);
    px_token_ids_free(&ids);
}

static const char *const GPT2_MERGES[] = {"h e", "l l", "he ll", "\xc4\xa0 w", "o r",
                                          "\xc4\xa0w or"};

static void test_gpt2_style(void)
{
    px_tokenizer_t *tok = NULL;
    char err[512] = "";
    px_status_t st = load_json(make_tokenizer(GPT2_MERGES, 6, bytelevel(1)), "gpt2.json", err,
                               sizeof(err), &tok);
    CHECK(st == PX_OK, "load: %s", err);
    if (!tok)
        return;
    CHECK(px_tokenizer_vocab_size(tok) == 263, "vocab %u", px_tokenizer_vocab_size(tok));
    /* pieces "hello", " world": h e l l o -> he ll o -> hell o (rank 2);
     * Ġ w o r l d -> Ġw or l d -> Ġwor l d */
    encode_check(tok, "hello world", (const uint32_t[]){258, 'o', 261, 'l', 'd'}, 5);
    /* the added token is cut out first; a merge never crosses it */
    encode_check(tok, "he<|endoftext|>llo", (const uint32_t[]){256, 262, 257, 'o'}, 4);
    /* GPT-2's regex: "s" of "'s" apart; whitespace before a word: the last
     * space goes with the word (\s+(?!\S)) */
    encode_check(tok, "he's  world", (const uint32_t[]){256, '\'', 's', ' ', 261, 'l', 'd'}, 7);

    /* decode: the bytes back, whatever they are */
    const char *text = "h\xc3\xa9llo\n\tw\xc3\xb6rld \xe6\x97\xa5\xe6\x9c\xac <|endoftext|> \x01";
    px_token_ids_t ids = {0};
    char *back = NULL;
    size_t len = 0;
    st = px_tokenizer_encode(tok, text, strlen(text), &ids, err, sizeof(err));
    CHECK(st == PX_OK, "encode: %s", err);
    st = px_tokenizer_decode(tok, ids.ids, ids.len, &back, &len, err, sizeof(err));
    CHECK(st == PX_OK && len == strlen(text) && !memcmp(back, text, len),
          "decode(encode(x)) == x: status %d (%s), %zu bytes", st, err, len);
    free(back);
    px_token_ids_free(&ids);
    /* the ByteLevel alphabet inverted: vocab entry b (bytes_to_unicode(b)) is byte b */
    int all_bytes = 1;
    for (uint32_t v = 0; v < 256; v++) {
        const uint8_t *one = px_tokenizer_token_bytes(tok, v, &len);
        all_bytes &= one && len == 1 && one[0] == v;
    }
    CHECK(all_bytes, "each of the 256 ByteLevel characters stands for its byte");
    const uint8_t *b = px_tokenizer_token_bytes(tok, ' ', &len);
    CHECK(b && len == 1 && b[0] == ' ', "token 32 is the space byte");
    b = px_tokenizer_token_bytes(tok, 261, &len);
    CHECK(b && len == 4 && !memcmp(b, " wor", 4), "token 261 is ' wor'");
    CHECK(px_tokenizer_token_bytes(tok, 263, &len) == NULL, "no token 263");
    uint32_t bad[] = {104, 5000};
    st = px_tokenizer_decode(tok, bad, 2, &back, &len, err, sizeof(err));
    CHECK(st == PX_ERR_INVALID_ARGUMENT && strstr(err, "id 5000 (index 1)"), "bad id: %s", err);

    /* text that is not UTF-8: the byte offset named */
    st = px_tokenizer_encode(tok, "caf\xe9 x", 6, &ids, err, sizeof(err));
    CHECK(st == PX_ERR_INVALID_ARGUMENT && strstr(err, "not valid UTF-8 at byte 3"),
          "latin-1: status %d, %s", st, err);
    px_token_ids_free(&ids);
    /* GPT-2's regex lets chunks be cut at "X\nY" only */
    const char *lines = "first line\nsecond line\n\nthird\n";
    CHECK(px_tokenizer_chunk_end(tok, lines, strlen(lines), 0, 1) == 11,
          "cut after 'line\\n' before 's': %zu", px_tokenizer_chunk_end(tok, lines,
                                                                        strlen(lines), 0, 1));
    CHECK(px_tokenizer_chunk_end(tok, lines, strlen(lines), 11, 5) == strlen(lines),
          "no cut at '\\n\\n' or at the end");
    px_tokenizer_destroy(tok);
}

/* tokenizers' five Split behaviours on "a-b--c", seen through merges that
 * join '-' with its neighbours within a piece */
static void test_split_behaviors(void)
{
    static const char *const merges[] = {"- -", "a -", "- b", "b -", "- c"};
    enum { DD = 256, AD, DB, BD, DC };
    static const struct { const char *behavior; uint32_t ids[8]; size_t n; } cases[] = {
        {"Removed", {'a', 'b', 'c'}, 3},
        {"Isolated", {'a', '-', 'b', '-', '-', 'c'}, 6},
        {"MergedWithPrevious", {AD, BD, '-', 'c'}, 4},
        {"MergedWithNext", {'a', DB, '-', DC}, 4},
        {"Contiguous", {'a', '-', 'b', DD, 'c'}, 5},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        px_tokenizer_t *tok = NULL;
        char err[512] = "";
        json_t *pre = json_pack("{s:s, s:[{s:s, s:{s:s}, s:s, s:b}, o]}", "type", "Sequence",
                                "pretokenizers", "type", "Split", "pattern", "String", "-",
                                "behavior", cases[i].behavior, "invert", 0, bytelevel(0));
        px_status_t st = load_json(make_tokenizer(merges, 5, pre), "split.json", err,
                                   sizeof(err), &tok);
        CHECK(st == PX_OK, "%s: load: %s", cases[i].behavior, err);
        if (!tok)
            continue;
        fprintf(stderr, "Split behavior %s\n", cases[i].behavior);
        encode_check(tok, "a-b--c", cases[i].ids, cases[i].n);
        px_tokenizer_destroy(tok);
    }
}

/* A piece of a million spaces (one \s+ piece) merges in O(n log n): the
 * leftmost pairs first, so 999,999 spaces become 249,999 x 4 + 2 + 1, and
 * the last space goes with the word. */
static void test_long_piece(void)
{
    static const char *const merges[] = {"\xc4\xa0 \xc4\xa0", "\xc4\xa0\xc4\xa0 \xc4\xa0\xc4\xa0"};
    px_tokenizer_t *tok = NULL;
    char err[512] = "";
    size_t n = 1000000;
    char *text = malloc(n + 2);
    px_token_ids_t ids = {0};
    px_status_t st = load_json(make_tokenizer(merges, 2, bytelevel(1)), "spaces.json", err,
                               sizeof(err), &tok);
    CHECK(st == PX_OK && text, "load: %s", err);
    if (!tok || !text)
        goto out;
    memset(text, ' ', n);
    text[n] = 'x';
    text[n + 1] = 0;
    st = px_tokenizer_encode(tok, text, n + 1, &ids, err, sizeof(err));
    CHECK(st == PX_OK && ids.len == 250003, "a million spaces: status %d (%s), %zu ids", st, err,
          ids.len);
    int shape = ids.len == 250003;
    for (size_t i = 0; shape && i < 249999; i++)
        shape = ids.ids[i] == 257;
    CHECK(shape && ids.ids[249999] == 256 && ids.ids[250000] == ' ' &&
          ids.ids[250001] == ' ' && ids.ids[250002] == 'x', "4-space tokens, then 2, 1, ' x'");
out:
    px_token_ids_free(&ids);
    px_tokenizer_destroy(tok);
    free(text);
}

/* 3,000 seeded random texts, half built of UTF-8 pieces (ASCII words,
 * 2-4 byte characters, whitespace runs, the added token, apostrophes), half
 * raw bytes: each either encodes and decodes back to itself, or (raw bytes
 * only) is refused as not UTF-8; never anything else. */
static void test_random_texts(void)
{
    static const char *const parts[] = {"hello", " world", "'s", "'ll", " ", "  ", "\n", "\r\n",
                                        "\t", "<|endoftext|>", "<|endof", "\xc3\xa9", "\xe6\x97\xa5",
                                        "\xf0\x9f\x98\x80", "123", "4", "!?", "\xe2\x80\x94",
                                        "\xc2\xa0", "he", "ll", "or"};
    px_tokenizer_t *tok = NULL;
    char err[512] = "", text[256];
    uint64_t x = 88172645463325252ull;
    int refused = 0, bad = 0;
    if (load_json(make_tokenizer(GPT2_MERGES, 6, bytelevel(1)), "rand.json", err, sizeof(err),
                  &tok) != PX_OK) {
        CHECK(0, "load: %s", err);
        return;
    }
    for (int it = 0; it < 3000; it++) {
        size_t n = 0;
        int raw = it & 1;
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        size_t want = 1 + x % 200;
        while (n < want) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            if (raw) {
                text[n++] = (char)(x >> 24);
                continue;
            }
            const char *p = parts[x % (sizeof(parts) / sizeof(parts[0]))];
            size_t l = strlen(p);
            if (n + l > want)
                break;
            memcpy(text + n, p, l);
            n += l;
        }
        px_token_ids_t ids = {0};
        char *back = NULL;
        size_t blen = 0;
        px_status_t st = px_tokenizer_encode(tok, text, n, &ids, err, sizeof(err));
        if (st == PX_ERR_INVALID_ARGUMENT && raw && strstr(err, "not valid UTF-8")) {
            refused++;
        } else if (st != PX_OK ||
                   px_tokenizer_decode(tok, ids.ids, ids.len, &back, &blen, err, sizeof(err)) !=
                       PX_OK || blen != n || memcmp(back, text, n)) {
            if (bad++ < 5)
                fprintf(stderr, "text %d (%zu bytes, raw %d): status %d (%s)\n", it, n, raw, st,
                        err);
        }
        free(back);
        px_token_ids_free(&ids);
    }
    CHECK(bad == 0, "%d random texts neither round-tripped nor were refused as not UTF-8", bad);
    CHECK(refused > 1000, "most raw-byte texts refused as not UTF-8 (%d)", refused);
    px_tokenizer_destroy(tok);
}

static void test_bad_files(void)
{
    char path[700], err[512];
    px_tokenizer_t *tok = NULL;
    px_status_t st;
    json_t *j;

    snprintf(path, sizeof(path), "%s/truncated.json", tmpdir);
    FILE *f = fopen(path, "w");
    fputs("{\"model\": {\"type\": \"BPE\", \"vocab\": {", f);
    fclose(f);
    st = px_tokenizer_load(path, err, sizeof(err), &tok);
    CHECK(st == PX_ERR_INVALID_ARGUMENT && strstr(err, "truncated.json") &&
          strstr(err, "not valid JSON (line 1"), "bad JSON: %s", err);
    st = px_tokenizer_load("/nonexistent/t.json", err, sizeof(err), &tok);
    CHECK(st == PX_ERR_NOT_FOUND && strstr(err, "/nonexistent/t.json"), "missing: %s", err);

    static const struct { const char *name, *want; } cases[] = {
        {"no_merges", "model.merges is missing"},
        {"unigram", "model.type 'Unigram' is not supported"},
        {"whitespace", "pre_tokenizer.type 'Whitespace' is not supported"},
        {"null_pre", "pre_tokenizer is null: not a byte-level BPE"},
        {"bl_first", "ByteLevel is supported only as the last pre-tokenizer"},
        {"bad_regex", "does not compile"},
        {"bad_merge", "model.merges[1] 'l zz': 'zz' not in model.vocab"},
        {"prefix", "model.continuing_subword_prefix / end_of_word_suffix are set"},
        {"normalizer", "normalizer.type 'NFC' is not supported"},
        {"lstrip", "added_tokens[0] '<|endoftext|>': lstrip true is not supported"},
        {"bert", "model.type 'WordPiece' is not supported (byte-level BPE only)"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *n = cases[i].name;
        j = make_tokenizer(GPT2_MERGES, 6, bytelevel(1));
        json_t *model = json_object_get(j, "model");
        if (!strcmp(n, "no_merges"))
            json_object_del(model, "merges");
        else if (!strcmp(n, "unigram"))
            json_object_set_new(model, "type", json_string("Unigram"));
        else if (!strcmp(n, "whitespace"))
            json_object_set_new(j, "pre_tokenizer", json_pack("{s:s}", "type", "Whitespace"));
        else if (!strcmp(n, "null_pre"))
            json_object_set_new(j, "pre_tokenizer", json_null());
        else if (!strcmp(n, "bl_first"))
            json_object_set_new(j, "pre_tokenizer",
                                json_pack("{s:s, s:[o, o]}", "type", "Sequence",
                                          "pretokenizers", bytelevel(0), bytelevel(0)));
        else if (!strcmp(n, "bad_regex"))
            json_object_set_new(j, "pre_tokenizer",
                                json_pack("{s:s, s:[{s:s, s:{s:s}, s:s, s:b}, o]}", "type",
                                          "Sequence", "pretokenizers", "type", "Split",
                                          "pattern", "Regex", "(unclosed", "behavior",
                                          "Isolated", "invert", 0, bytelevel(0)));
        else if (!strcmp(n, "bad_merge"))
            json_array_set_new(json_object_get(model, "merges"), 1, json_string("l zz"));
        else if (!strcmp(n, "prefix"))
            json_object_set_new(model, "continuing_subword_prefix", json_string("##"));
        else if (!strcmp(n, "normalizer"))
            json_object_set_new(j, "normalizer", json_pack("{s:s}", "type", "NFC"));
        else if (!strcmp(n, "bert")) { /* a BERT file: every part not byte-level */
            json_object_set_new(model, "type", json_string("WordPiece"));
            json_object_set_new(j, "normalizer", json_pack("{s:s}", "type", "BertNormalizer"));
            json_object_set_new(j, "pre_tokenizer", json_pack("{s:s}", "type",
                                                              "BertPreTokenizer"));
        }
        else if (!strcmp(n, "lstrip"))
            json_object_set_new(json_array_get(json_object_get(j, "added_tokens"), 0), "lstrip",
                                json_true());
        char name[64];
        snprintf(name, sizeof(name), "bad_%s.json", n);
        err[0] = 0;
        tok = NULL;
        st = load_json(j, name, err, sizeof(err), &tok);
        CHECK(st == PX_ERR_INVALID_ARGUMENT && strstr(err, name) && strstr(err, cases[i].want),
              "%s: status %d, '%s' should name the file and say '%s'", n, st, err,
              cases[i].want);
        px_tokenizer_destroy(tok);
    }
}

static char *read_file(const char *path, size_t *len_p)
{
    FILE *f = fopen(path, "rb");
    char *buf;
    long n;
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *len_p = (size_t)n;
    return buf;
}

static int file_mode(const char *mode, const char *tok_path, const char *text_path)
{
    px_tokenizer_t *tok = NULL;
    char err[1024] = "";
    size_t len = 0;
    char *text = read_file(text_path, &len);
    px_token_ids_t ids = {0};
    CHECK(text, "read %s", text_path);
    CHECK(px_tokenizer_load(tok_path, err, sizeof(err), &tok) == PX_OK, "load: %s", err);
    if (!text || !tok)
        return 1;
    CHECK(px_tokenizer_encode(tok, text, len, &ids, err, sizeof(err)) == PX_OK, "encode: %s",
          err);
    if (!strcmp(mode, "roundtrip")) {
        char *back = NULL;
        size_t blen = 0;
        CHECK(px_tokenizer_decode(tok, ids.ids, ids.len, &back, &blen, err, sizeof(err)) ==
              PX_OK, "decode: %s", err);
        CHECK(back && blen == len && !memcmp(back, text, len),
              "decode(encode(text)) == text (%zu bytes back of %zu)", blen, len);
        printf("decode(encode(text)) == text: %zu bytes, %zu ids\n", len, ids.len);
        free(back);
    } else {
        px_token_ids_t parts = {0};
        size_t nchunks = 0;
        for (size_t start = 0; start < len; nchunks++) {
            size_t end = px_tokenizer_chunk_end(tok, text, len, start, 4096);
            CHECK(px_tokenizer_encode(tok, text + start, end - start, &parts, err,
                                      sizeof(err)) == PX_OK, "encode chunk: %s", err);
            start = end;
        }
        CHECK(nchunks > 10, "the text is cut into %zu chunks", nchunks);
        CHECK(parts.len == ids.len && !memcmp(parts.ids, ids.ids, ids.len * sizeof(uint32_t)),
              "%zu chunks encode to the whole text's %zu ids (got %zu)", nchunks, ids.len,
              parts.len);
        printf("%zu chunks of ~4 KiB encode to the whole text's %zu ids\n", nchunks, ids.len);
        px_token_ids_free(&parts);
    }
    px_token_ids_free(&ids);
    px_tokenizer_destroy(tok);
    free(text);
    return fails ? 1 : 0;
}

/* The tokenizer's place beside a token file: the last extension of the
 * file name replaced (not a dot of a directory), or appended. */
static void test_sidecar(void)
{
    static const char *const cases[][2] = {
        {"/d/book.bin", "/d/book.tokenizer.json"},
        {"book-bpe.bin", "book-bpe.tokenizer.json"},
        {"/d.x/book", "/d.x/book.tokenizer.json"},
        {"/d/a.b.bin", "/d/a.b.tokenizer.json"},
        {"/d/.hidden", "/d/.hidden.tokenizer.json"},
    };
    char buf[64];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        CHECK(px_tokenizer_sidecar_path(cases[i][0], buf, sizeof(buf)) == 0 &&
                  !strcmp(buf, cases[i][1]), "sidecar of %s: %s", cases[i][0], buf);
    CHECK(px_tokenizer_sidecar_path("/a/very/long/path/to/some/token/file.bin", buf, 16) == -1,
          "a name that does not fit");
}

int main(int argc, char **argv)
{
    const char *t = getenv("TMPDIR");
    if (argc == 4 && (!strcmp(argv[1], "roundtrip") || !strcmp(argv[1], "chunks")))
        return file_mode(argv[1], argv[2], argv[3]);
    snprintf(tmpdir, sizeof(tmpdir), "%s/px_tokenizer_XXXXXX", t ? t : "/tmp");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_gpt2_style();
    test_split_behaviors();
    test_long_piece();
    test_random_texts();
    test_bad_files();
    test_sidecar();
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", tmpdir);
    return fails ? 1 : 0;
}
