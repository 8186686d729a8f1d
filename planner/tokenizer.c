/* tokenizer.c: byte-level BPE from a Hugging Face tokenizer.json (see
 * tokenizer.h for what a file may hold).
 *
 * Encoding follows tokenizers (the Rust crate) step by step:
 *   1. added tokens are cut out of the text (AddedVocabulary::split_with_
 *      indices: leftmost-longest, non-normalized tokens first);
 *   2. each gap goes through the pre-tokenizer's splits (PCRE2 regexes, each
 *      run on the pieces of the previous one, tokenizers' Split behaviours);
 *   3. each piece is BPE-merged (models/bpe/word.rs merge_all): repeatedly
 *      the adjacent pair of lowest merge rank, the leftmost of equal ranks,
 *      is replaced by its merged token.
 * All lookups are in byte space: a vocab entry's ByteLevel characters
 * (GPT-2's bytes_to_unicode) are turned back into the bytes they stand for
 * at load, so a piece's bytes are looked up without mapping them to
 * characters. Lookups are binary searches of sorted arrays (vocab by bytes,
 * merges by id pair). After load everything is read-only; the PCRE2 match
 * data and JIT stack are per encode call, so threads share a tokenizer. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer.h"

#include <errno.h>
#include <jansson.h>
#include <pcre2.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* GPT-2's pre-tokenizer regex, as tokenizers' ByteLevel(use_regex=true)
 * compiles it (pre_tokenizers/byte_level.rs). */
static const char GPT2_REGEX[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
/* Llama 3's Split regex (its tokenizer.json); with GPT2_REGEX the patterns
 * whose pieces cannot cross a "X\nY" line end (px_tokenizer_chunk_end). */
static const char LLAMA3_REGEX[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

#define MAX_STEPS 8

enum split_behavior { SPLIT_REMOVED, SPLIT_ISOLATED, SPLIT_MERGED_PREV, SPLIT_MERGED_NEXT,
                      SPLIT_CONTIGUOUS };

typedef struct {
    enum { STEP_SPLIT, STEP_PREFIX_SPACE } kind;
    pcre2_code *re;               /* STEP_SPLIT */
    enum split_behavior behavior; /* STEP_SPLIT */
} step_t;

typedef struct {          /* a model vocab entry in byte space */
    const uint8_t *bytes; /* in tok->arena */
    uint32_t len;
    uint32_t id;
} vocab_entry_t;

typedef struct {
    uint64_t pair; /* left id << 32 | right id */
    uint32_t rank; /* index in model.merges: lower merges first */
    uint32_t id;   /* the merged token */
} merge_t;

typedef struct {
    const uint8_t *bytes; /* content, in tok->arena */
    uint32_t len;
    uint32_t id;
    int normalized;
} added_t;

struct px_tokenizer {
    uint8_t *arena; /* every token's bytes */
    vocab_entry_t *vocab;
    size_t nvocab;
    merge_t *merges;
    size_t nmerges;
    added_t *added;
    size_t nadded;
    uint8_t added_first[256]; /* 1 where some added token starts with that byte */
    int64_t byte_id[256];     /* the single-byte token, -1 if the vocab lacks it */
    int64_t unk_id;           /* -1: none (bytes without a token are dropped) */
    int ignore_merges;
    step_t steps[MAX_STEPS];
    int nsteps;
    int chunkable; /* px_tokenizer_chunk_end may cut */
    pcre2_code *utf_check; /* "\A": its match validates a subject's UTF-8 */
    uint32_t vocab_size;
    const uint8_t **id_bytes; /* [vocab_size] for decode; NULL where no token */
    uint32_t *id_len;
};

/* ---- errors ---- */

static px_status_t fail(char *errbuf, size_t errlen, const char *path, px_status_t status,
                        const char *fmt, ...)
{
    va_list ap;
    if (errbuf && errlen) {
        int n = snprintf(errbuf, errlen, "tokenizer %s: ", path);
        if (n >= 0 && (size_t)n < errlen) {
            va_start(ap, fmt);
            vsnprintf(errbuf + n, errlen - (size_t)n, fmt, ap);
            va_end(ap);
        }
    }
    return status;
}

/* ---- GPT-2's bytes_to_unicode (openai/gpt-2 encoder.py), inverted ---- */

static int printable_byte(unsigned b)
{
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

/* code point -> byte of the ByteLevel alphabet, -1 if not in it: the
 * printable bytes stand for themselves, the other 68 (0..32, 127..160, 173,
 * in order) for 256.. 323 */
static int byte_of_codepoint(uint32_t cp)
{
    uint32_t k = cp - 256;
    if (cp < 256)
        return printable_byte(cp) ? (int)cp : -1;
    if (k < 33)
        return (int)k;
    if (k < 67)
        return (int)(127 + (k - 33));
    return k == 67 ? 173 : -1;
}

/* Decodes a vocab string of ByteLevel characters into bytes (out holds at
 * least strlen(s) bytes). Returns the length, or -1 with *bad_p at the first
 * character outside the alphabet. */
static long bytelevel_decode(const char *s, size_t n, uint8_t *out, size_t *bad_p)
{
    size_t i = 0, k = 0;
    while (i < n) {
        const uint8_t *u = (const uint8_t *)s + i;
        uint32_t cp;
        size_t w;
        if (u[0] < 0x80) {
            cp = u[0];
            w = 1;
        } else if ((u[0] & 0xE0) == 0xC0 && i + 1 < n && (u[1] & 0xC0) == 0x80) {
            cp = ((uint32_t)(u[0] & 0x1F) << 6) | (u[1] & 0x3F);
            w = 2;
        } else {
            *bad_p = i;
            return -1;
        }
        int b = byte_of_codepoint(cp);
        if (b < 0) {
            *bad_p = i;
            return -1;
        }
        out[k++] = (uint8_t)b;
        i += w;
    }
    return (long)k;
}

/* ---- lookups ---- */

static int cmp_bytes(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen)
{
    int c = memcmp(a, b, alen < blen ? alen : blen);
    if (c)
        return c;
    return alen < blen ? -1 : alen > blen;
}

static int cmp_vocab(const void *x, const void *y)
{
    const vocab_entry_t *a = x, *b = y;
    return cmp_bytes(a->bytes, a->len, b->bytes, b->len);
}

static int64_t vocab_find(const px_tokenizer_t *tok, const uint8_t *bytes, size_t len)
{
    size_t lo = 0, hi = tok->nvocab;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = cmp_bytes(tok->vocab[mid].bytes, tok->vocab[mid].len, bytes, len);
        if (c == 0)
            return tok->vocab[mid].id;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

static int cmp_merge(const void *x, const void *y)
{
    const merge_t *a = x, *b = y;
    if (a->pair != b->pair)
        return a->pair < b->pair ? -1 : 1;
    return a->rank < b->rank ? -1 : a->rank > b->rank;
}

static const merge_t *merge_find(const px_tokenizer_t *tok, uint32_t left, uint32_t right)
{
    uint64_t key = (uint64_t)left << 32 | right;
    size_t lo = 0, hi = tok->nmerges;
    while (lo < hi) { /* the first entry of the key: its lowest rank */
        size_t mid = lo + (hi - lo) / 2;
        if (tok->merges[mid].pair < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < tok->nmerges && tok->merges[lo].pair == key ? &tok->merges[lo] : NULL;
}

/* ---- loading ---- */

static const char *type_of(json_t *obj)
{
    const char *t = json_string_value(json_object_get(obj, "type"));
    return t ? t : "(none)";
}

static int is_false(json_t *v) { return !v || json_is_null(v) || json_is_false(v); }
static int is_empty_str(json_t *v)
{
    return !v || json_is_null(v) || (json_is_string(v) && !json_string_length(v));
}

static px_status_t add_step(px_tokenizer_t *tok, const char *path, const char *field,
                            const char *pattern, int literal, enum split_behavior behavior,
                            char *errbuf, size_t errlen)
{
    int code;
    PCRE2_SIZE off;
    pcre2_code *re;
    if (tok->nsteps == MAX_STEPS)
        return fail(errbuf, errlen, path, PX_ERR_INVALID_ARGUMENT,
                    "%s: more than %d pre-tokenizer splits", field, MAX_STEPS);
    re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
                       PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP), &code, &off, NULL);
    if (!re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(code, msg, sizeof(msg));
        return fail(errbuf, errlen, path, PX_ERR_INVALID_ARGUMENT,
                    "%s: regex '%s' does not compile at offset %zu: %s", field, pattern,
                    (size_t)off, (const char *)msg);
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* the interpreter where JIT is absent */
    tok->steps[tok->nsteps].kind = STEP_SPLIT;
    tok->steps[tok->nsteps].re = re;
    tok->steps[tok->nsteps].behavior = behavior;
    tok->nsteps++;
    if (literal || (strcmp(pattern, GPT2_REGEX) && strcmp(pattern, LLAMA3_REGEX)) ||
        behavior != SPLIT_ISOLATED)
        tok->chunkable = 0;
    return PX_OK;
}

static px_status_t load_bytelevel(px_tokenizer_t *tok, const char *path, const char *field,
                                  json_t *bl, char *errbuf, size_t errlen)
{
    json_t *use_regex = json_object_get(bl, "use_regex");
    if (json_is_true(json_object_get(bl, "add_prefix_space"))) {
        tok->steps[tok->nsteps++].kind = STEP_PREFIX_SPACE; /* nsteps < MAX_STEPS: checked */
        tok->chunkable = 0; /* a space before each chunk would change its first piece */
    }
    if (!use_regex || json_is_true(use_regex))
        return add_step(tok, path, field, GPT2_REGEX, 0, SPLIT_ISOLATED, errbuf, errlen);
    return PX_OK;
}

static px_status_t load_split(px_tokenizer_t *tok, const char *path, const char *field,
                              json_t *sp, char *errbuf, size_t errlen)
{
    static const char *names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext",
                                  "Contiguous"};
    json_t *pat = json_object_get(sp, "pattern");
    const char *behavior = json_string_value(json_object_get(sp, "behavior"));
    const char *regex = json_string_value(json_object_get(pat, "Regex"));
    const char *literal = json_string_value(json_object_get(pat, "String"));
    int b = -1;
    for (int k = 0; behavior && k < 5; k++)
        if (!strcmp(behavior, names[k]))
            b = k;
    if (!regex && !literal)
        return fail(errbuf, errlen, path, PX_ERR_INVALID_ARGUMENT,
                    "%s.pattern: neither {\"Regex\": ...} nor {\"String\": ...}", field);
    if (b < 0)
        return fail(errbuf, errlen, path, PX_ERR_INVALID_ARGUMENT,
                    "%s.behavior '%s' is not one of Removed, Isolated, MergedWithPrevious, "
                    "MergedWithNext, Contiguous", field, behavior ? behavior : "(none)");
    if (!is_false(json_object_get(sp, "invert")))
        return fail(errbuf, errlen, path, PX_ERR_INVALID_ARGUMENT,
                    "%s.invert true is not supported", field);
    return add_step(tok, path, field, regex ? regex : literal, !regex, (enum split_behavior)b,
                    errbuf, errlen);
}

/* pre_tokenizer: ByteLevel, or Sequence[Split..., ByteLevel] */
static px_status_t load_pretokenizer(px_tokenizer_t *tok, const char *path, json_t *pre,
                                     char *errbuf, size_t errlen)
{
    const char *t = type_of(pre);
    if (!pre || json_is_null(pre))
        return fail(errbuf, errlen, path, PX_ERR_INVALID_ARGUMENT,
                    "pre_tokenizer is null: not a byte-level BPE (needs a ByteLevel "
                    "pre-tokenizer)");
    if (!strcmp(t, "ByteLevel"))
        return load_bytelevel(tok, path, "pre_tokenizer", pre, errbuf, errlen);
    if (!strcmp(t, "Sequence")) {
        json_t *list = json_object_get(pre, "pretokenizers");
        size_t n = json_array_size(list);
        if (!n || !json_is_array(list))
            return fail(errbuf, errlen, path, PX_ERR_INVALID_ARGUMENT,
                        "pre_tokenizer.pretokenizers: a non-empty array is needed");
        for (size_t i = 0; i < n; i++) {
            json_t *p = json_array_get(list, i);
            const char *pt = type_of(p);
            char field[64];
            px_status_t status;
            snprintf(field, sizeof(field), "pre_tokenizer.pretokenizers[%zu]", i);
            if (i + 1 == n && !strcmp(pt, "ByteLevel"))
                status = load_bytelevel(tok, path, field, p, errbuf, errlen);
            else if (!strcmp(pt, "Split"))
                status = load_split(tok, path, field, p, errbuf, errlen);
            else if (!strcmp(pt, "ByteLevel"))
                status = fail(errbuf, errlen, path, PX_ERR_INVALID_ARGUMENT,
                              "%s: ByteLevel is supported only as the last pre-tokenizer", field);
            else
                status = fail(errbuf, errlen, path, PX_ERR_INVALID_ARGUMENT,
                              "%s.type '%s' is not supported (Split, then ByteLevel last)",
                              field, pt);
            if (status != PX_OK)
                return status;
            if (i + 1 == n && strcmp(pt, "ByteLevel"))
                return fail(errbuf, errlen, path, PX_ERR_INVALID_ARGUMENT,
                            "pre_tokenizer: the Sequence does not end in ByteLevel: not a "
                            "byte-level BPE");
        }
        return PX_OK;
    }
    return fail(errbuf, errlen, path, PX_ERR_INVALID_ARGUMENT,
                "pre_tokenizer.type '%s' is not supported: not a byte-level BPE (ByteLevel, or "
                "a Sequence of Split ending in ByteLevel)", t);
}

/* one merge "a b" or ["a", "b"] -> its two strings (borrowed from m) */
static int merge_parts(json_t *m, const char **a_p, size_t *la_p, const char **b_p,
                       size_t *lb_p)
{
    if (json_is_string(m)) {
        const char *s = json_string_value(m);
        const char *sp = strchr(s, ' ');
        if (!sp || strchr(sp + 1, ' '))
            return -1;
        *a_p = s;
        *la_p = (size_t)(sp - s);
        *b_p = sp + 1;
        *lb_p = strlen(sp + 1);
        return 0;
    }
    if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
        json_is_string(json_array_get(m, 1))) {
        *a_p = json_string_value(json_array_get(m, 0));
        *la_p = json_string_length(json_array_get(m, 0));
        *b_p = json_string_value(json_array_get(m, 1));
        *lb_p = json_string_length(json_array_get(m, 1));
        return 0;
    }
    return -1;
}

static px_status_t load_model(px_tokenizer_t *tok, const char *path, json_t *model,
                              json_t *added, uint8_t *arena, size_t *used_p, char *errbuf,
                              size_t errlen)
{
    json_t *vocab = json_object_get(model, "vocab");
    json_t *merges = json_object_get(model, "merges");
    json_t *unk = json_object_get(model, "unk_token");
    const char *key;
    json_t *val;
    size_t k = 0, used = 0;
    uint8_t tmp[2048];

    if (strcmp(type_of(model), "BPE"))
        return fail(errbuf, errlen, path, PX_ERR_INVALID_ARGUMENT,
                    "model.type '%s' is not supported (byte-level BPE only)", type_of(model));
    if (!json_is_object(vocab))
        return fail(errbuf, errlen, path, PX_ERR_INVALID_ARGUMENT,
                    "model.vocab is missing or not an object");
    if (!json_is_array(merges))
        return fail(errbuf, errlen, path, PX_ERR_INVALID_ARGUMENT,
                    "model.merges is missing or not an array");
    if (!is_false(json_object_get(model, "dropout")) &&
        json_real_value(json_object_get(model, "dropout")) != 0)
        return fail(errbuf, errlen, path, PX_ERR_INVALID_ARGUMENT,
                    "model.dropout is set: BPE dropout is not supported (ids would be random)");
    if (!is_empty_str(json_object_get(model, "continuing_subword_prefix")) ||
        !is_empty_str(json_object_get(model, "end_of_word_suffix")))
        return fail(errbuf, errlen, path, PX_ERR_INVALID_ARGUMENT,
                    "model.continuing_subword_prefix / end_of_word_suffix are set: not a "
                    "byte-level BPE");
    if (!is_false(json_object_get(model, "byte_fallback")))
        return fail(errbuf, errlen, path, PX_ERR_INVALID_ARGUMENT,
                    "model.byte_fallback true is not supported (a SentencePiece-style BPE, "
                    "not byte-level)");
    tok->ignore_merges = json_is_true(json_object_get(model, "ignore_merges"));

    tok->nvocab = json_object_size(vocab);
    tok->vocab = calloc(tok->nvocab ? tok->nvocab : 1, sizeof(*tok->vocab));
    if (!tok->vocab)
        return PX_ERR_NO_MEMORY;
    json_object_foreach(vocab, key, val) {
        size_t bad, n = strlen(key);
        long blen;
        json_int_t id = json_integer_value(val);
        if (!json_is_integer(val) || id < 0 || id >= INT32_MAX)
            return fail(errbuf, errlen, path, PX_ERR_INVALID_ARGUMENT,
                        "model.vocab['%s']: id is not an integer in [0, 2^31 - 1)", key);
        blen = bytelevel_decode(key, n, arena + used, &bad);
        if (blen < 0)
            return fail(errbuf, errlen, path, PX_ERR_INVALID_ARGUMENT,
                        "model.vocab['%s'] (id %lld): character at byte %zu is not in the "
                        "ByteLevel alphabet: not a byte-level BPE vocab", key, (long long)id,
                        bad);
        tok->vocab[k].bytes = arena + used;
        tok->vocab[k].len = (uint32_t)blen;
        tok->vocab[k].id = (uint32_t)id;
        used += (size_t)blen;
        k++;
    }
    qsort(tok->vocab, tok->nvocab, sizeof(*tok->vocab), cmp_vocab);
    for (size_t i = 0; i < 256; i++) {
        uint8_t b = (uint8_t)i;
        tok->byte_id[i] = vocab_find(tok, &b, 1);
    }
    tok->unk_id = -1;
    if (json_is_string(unk)) {
        size_t bad;
        long blen = json_string_length(unk) <= sizeof(tmp)
                        ? bytelevel_decode(json_string_value(unk), json_string_length(unk), tmp,
                                           &bad) : -1;
        /* the unk token may also be an added token, whose content is raw */
        tok->unk_id = blen >= 0 ? vocab_find(tok, tmp, (size_t)blen) : -1;
        for (size_t i = 0; tok->unk_id < 0 && i < json_array_size(added); i++) {
            json_t *a = json_array_get(added, i);
            if (json_is_string(json_object_get(a, "content")) &&
                !strcmp(json_string_value(json_object_get(a, "content")),
                        json_string_value(unk)))
                tok->unk_id = json_integer_value(json_object_get(a, "id"));
        }
        if (tok->unk_id < 0)
            return fail(errbuf, errlen, path, PX_ERR_INVALID_ARGUMENT,
                        "model.unk_token '%s' is not in model.vocab", json_string_value(unk));
    }

    uint8_t *scratch = NULL; /* a merge's two tokens' bytes */
    size_t scratch_len = 0;
    tok->nmerges = json_array_size(merges);
    tok->merges = calloc(tok->nmerges ? tok->nmerges : 1, sizeof(*tok->merges));
    if (!tok->merges)
        return PX_ERR_NO_MEMORY;
    for (size_t i = 0; i < tok->nmerges; i++) {
        json_t *m = json_array_get(merges, i);
        const char *a, *b;
        size_t sa, sb, bad;
        long la, lb;
        int64_t ida, idb, idab;
        if (merge_parts(m, &a, &sa, &b, &sb))
            return fail(errbuf, errlen, path, PX_ERR_INVALID_ARGUMENT,
                        "model.merges[%zu] is neither \"a b\" nor [\"a\", \"b\"]", i);
        if (sa + sb > scratch_len) { /* a merge of two long tokens (runs of spaces) */
            uint8_t *t = realloc(scratch, sa + sb);
            if (!t) {
                free(scratch);
                return PX_ERR_NO_MEMORY;
            }
            scratch = t;
            scratch_len = sa + sb;
        }
        la = bytelevel_decode(a, sa, scratch, &bad);
        lb = la < 0 ? -1 : bytelevel_decode(b, sb, scratch + la, &bad);
        ida = la < 0 ? -1 : vocab_find(tok, scratch, (size_t)la);
        idb = lb < 0 ? -1 : vocab_find(tok, scratch + la, (size_t)lb);
        idab = lb < 0 ? -1 : vocab_find(tok, scratch, (size_t)(la + lb));
        if (ida < 0 || idb < 0 || idab < 0) {
            free(scratch);
            return fail(errbuf, errlen, path, PX_ERR_INVALID_ARGUMENT,
                        "model.merges[%zu] '%.*s %.*s': '%.*s%.*s' not in model.vocab", i,
                        (int)sa, a, (int)sb, b, (int)(ida < 0 ? sa : idb < 0 ? sb : sa),
                        ida < 0 ? a : idb < 0 ? b : a, (int)(ida < 0 || idb < 0 ? 0 : sb), b);
        }
        tok->merges[i].pair = (uint64_t)ida << 32 | (uint64_t)idb;
        tok->merges[i].rank = (uint32_t)i;
        tok->merges[i].id = (uint32_t)idab;
    }
    free(scratch);
    qsort(tok->merges, tok->nmerges, sizeof(*tok->merges), cmp_merge);
    *used_p = used;
    return PX_OK;
}

static px_status_t load_added(px_tokenizer_t *tok, const char *path, json_t *added,
                              uint8_t *arena, size_t *used_p, char *errbuf, size_t errlen)
{
    size_t n = json_array_size(added);
    if (added && !json_is_null(added) && !json_is_array(added))
        return fail(errbuf, errlen, path, PX_ERR_INVALID_ARGUMENT,
                    "added_tokens is not an array");
    tok->added = calloc(n ? n : 1, sizeof(*tok->added));
    if (!tok->added)
        return PX_ERR_NO_MEMORY;
    for (size_t i = 0; i < n; i++) {
        json_t *a = json_array_get(added, i);
        json_t *content = json_object_get(a, "content");
        json_t *id = json_object_get(a, "id");
        size_t len = json_string_length(content);
        if (!json_is_string(content) || !len || !json_is_integer(id) ||
            json_integer_value(id) < 0 || json_integer_value(id) >= INT32_MAX)
            return fail(errbuf, errlen, path, PX_ERR_INVALID_ARGUMENT,
                        "added_tokens[%zu]: needs a non-empty \"content\" and an \"id\" in "
                        "[0, 2^31 - 1)", i);
        static const char *unsupported[] = {"lstrip", "rstrip", "single_word"};
        for (int k = 0; k < 3; k++)
            if (!is_false(json_object_get(a, unsupported[k])))
                return fail(errbuf, errlen, path, PX_ERR_INVALID_ARGUMENT,
                            "added_tokens[%zu] '%s': %s true is not supported", i,
                            json_string_value(content), unsupported[k]);
        memcpy(arena + *used_p, json_string_value(content), len);
        tok->added[i].bytes = arena + *used_p;
        tok->added[i].len = (uint32_t)len;
        tok->added[i].id = (uint32_t)json_integer_value(id);
        tok->added[i].normalized = !is_false(json_object_get(a, "normalized"));
        tok->added_first[tok->added[i].bytes[0]] = 1;
        if (memchr(tok->added[i].bytes, '\n', len))
            tok->chunkable = 0;
        *used_p += len;
        tok->nadded++;
    }
    return PX_OK;
}

/* id -> bytes for decode: added tokens over vocab entries */
static px_status_t build_decode_table(px_tokenizer_t *tok)
{
    uint32_t top = 0;
    for (size_t i = 0; i < tok->nvocab; i++)
        top = tok->vocab[i].id + 1 > top ? tok->vocab[i].id + 1 : top;
    for (size_t i = 0; i < tok->nadded; i++)
        top = tok->added[i].id + 1 > top ? tok->added[i].id + 1 : top;
    tok->vocab_size = top;
    tok->id_bytes = calloc(top ? top : 1, sizeof(*tok->id_bytes));
    tok->id_len = calloc(top ? top : 1, sizeof(*tok->id_len));
    if (!tok->id_bytes || !tok->id_len)
        return PX_ERR_NO_MEMORY;
    for (size_t i = 0; i < tok->nvocab; i++) {
        tok->id_bytes[tok->vocab[i].id] = tok->vocab[i].bytes;
        tok->id_len[tok->vocab[i].id] = tok->vocab[i].len;
    }
    for (size_t i = 0; i < tok->nadded; i++) {
        tok->id_bytes[tok->added[i].id] = tok->added[i].bytes;
        tok->id_len[tok->added[i].id] = tok->added[i].len;
    }
    return PX_OK;
}

px_status_t px_tokenizer_load(const char *path, char *errbuf, size_t errlen,
                              px_tokenizer_t **tok_p)
{
    json_error_t jerr;
    json_t *root, *model, *added, *norm, *dec, *val;
    const char *key;
    px_tokenizer_t *tok = NULL;
    px_status_t status;
    size_t arena_len = 1, used = 0;
    FILE *f = fopen(path, "rb");

    if (!f)
        return fail(errbuf, errlen, path, errno == ENOENT ? PX_ERR_NOT_FOUND : PX_ERR_IO,
                    "cannot open: %s", strerror(errno));
    root = json_loadf(f, 0, &jerr);
    fclose(f);
    if (!root)
        return fail(errbuf, errlen, path, PX_ERR_INVALID_ARGUMENT,
                    "not valid JSON (line %d, column %d: %s)", jerr.line, jerr.column, jerr.text);
    status = PX_ERR_INVALID_ARGUMENT;
    model = json_object_get(root, "model");
    added = json_object_get(root, "added_tokens");
    norm = json_object_get(root, "normalizer");
    dec = json_object_get(root, "decoder");
    if (!json_is_object(root) || !json_is_object(model)) {
        fail(errbuf, errlen, path, status, "no \"model\" object: not a tokenizers file");
        goto err_json;
    }
    if (strcmp(type_of(model), "BPE")) { /* first: the plainest answer for a BERT file */
        fail(errbuf, errlen, path, status,
             "model.type '%s' is not supported (byte-level BPE only)", type_of(model));
        goto err_json;
    }
    if (norm && !json_is_null(norm)) {
        fail(errbuf, errlen, path, status, "normalizer.type '%s' is not supported (none only)",
             type_of(norm));
        goto err_json;
    }
    if (dec && !json_is_null(dec) && strcmp(type_of(dec), "ByteLevel")) {
        fail(errbuf, errlen, path, status,
             "decoder.type '%s': not a byte-level BPE (the decoder must be ByteLevel)",
             type_of(dec));
        goto err_json;
    }
    /* every token's bytes fit in the length of its JSON string */
    json_object_foreach(json_object_get(model, "vocab"), key, val)
        arena_len += strlen(key);
    for (size_t i = 0; i < json_array_size(added); i++)
        arena_len += json_string_length(json_object_get(json_array_get(added, i), "content"));
    tok = calloc(1, sizeof(*tok));
    if (tok)
        tok->arena = malloc(arena_len);
    if (!tok || !tok->arena) {
        status = PX_ERR_NO_MEMORY;
        goto err_free;
    }
    tok->chunkable = 1;
    int code;
    PCRE2_SIZE off;
    tok->utf_check = pcre2_compile((PCRE2_SPTR) "\\A", PCRE2_ZERO_TERMINATED, PCRE2_UTF, &code,
                                   &off, NULL);
    if (!tok->utf_check) {
        status = fail(errbuf, errlen, path, PX_ERR_INTERNAL, "PCRE2 without UTF support");
        goto err_free;
    }
    status = load_pretokenizer(tok, path, json_object_get(root, "pre_tokenizer"), errbuf, errlen);
    if (status != PX_OK)
        goto err_free;
    status = load_model(tok, path, model, added, tok->arena, &used, errbuf, errlen);
    if (status != PX_OK)
        goto err_free;
    status = load_added(tok, path, added, tok->arena, &used, errbuf, errlen);
    if (status != PX_OK)
        goto err_free;
    status = build_decode_table(tok);
    if (status != PX_OK)
        goto err_free;
    json_decref(root);
    *tok_p = tok;
    return PX_OK;

err_free:
    if (status == PX_ERR_NO_MEMORY)
        fail(errbuf, errlen, path, status, "out of memory");
    px_tokenizer_destroy(tok);
err_json:
    json_decref(root);
    return status;
}

void px_tokenizer_destroy(px_tokenizer_t *tok)
{
    if (!tok)
        return;
    for (int i = 0; i < tok->nsteps; i++)
        pcre2_code_free(tok->steps[i].re);
    pcre2_code_free(tok->utf_check);
    free(tok->arena);
    free(tok->vocab);
    free(tok->merges);
    free(tok->added);
    free(tok->id_bytes);
    free(tok->id_len);
    free(tok);
}

uint32_t px_tokenizer_vocab_size(const px_tokenizer_t *tok) { return tok->vocab_size; }

/* ---- encoding ---- */

void px_token_ids_free(px_token_ids_t *ids)
{
    free(ids->ids);
    memset(ids, 0, sizeof(*ids));
}

static int ids_push(px_token_ids_t *ids, uint32_t id)
{
    if (ids->len == ids->cap) {
        size_t cap = ids->cap ? 2 * ids->cap : 1024;
        uint32_t *p = realloc(ids->ids, cap * sizeof(*p));
        if (!p)
            return -1;
        ids->ids = p;
        ids->cap = cap;
    }
    ids->ids[ids->len++] = id;
    return 0;
}

/* A merge candidate: the pair starting at symbol `pos`, to become `id`. */
typedef struct {
    uint32_t rank, pos, id;
} cand_t;

typedef struct { /* one encode call's state */
    const px_tokenizer_t *tok;
    px_token_ids_t *ids;
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    uint32_t *sym;        /* BPE symbols of the current piece ... */
    int32_t *next, *prev; /* ... linked (prev -2: merged into its left) */
    cand_t *heap;         /* merge candidates, 3 per symbol */
    size_t sym_cap;
    char *errbuf;
    size_t errlen;
} enc_t;

static int cand_less(const cand_t *a, const cand_t *b)
{
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void heap_push(cand_t *h, size_t *n, cand_t c)
{
    size_t i = (*n)++;
    while (i > 0 && cand_less(&c, &h[(i - 1) / 2])) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = c;
}

static cand_t heap_pop(cand_t *h, size_t *n)
{
    cand_t top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && cand_less(&h[c + 1], &h[c]))
            c++;
        if (!cand_less(&h[c], &last))
            break;
        h[i] = h[c];
        i = c;
    }
    if (*n)
        h[i] = last;
    return top;
}

static void push_pair(enc_t *e, size_t *nh, int32_t pos)
{
    int32_t nx = e->next[pos];
    const merge_t *m = nx >= 0 ? merge_find(e->tok, e->sym[pos], e->sym[nx]) : NULL;
    if (m)
        heap_push(e->heap, nh, (cand_t){m->rank, (uint32_t)pos, m->id});
}

/* models/bpe/word.rs merge_all: the pair of lowest merge rank, the leftmost
 * of equal ranks, is merged until no adjacent pair has a merge; a heap of
 * candidates (stale ones skipped when popped) keeps a long piece (a run of
 * spaces or punctuation) O(n log n). */
static px_status_t bpe(enc_t *e, const uint8_t *p, size_t n)
{
    const px_tokenizer_t *tok = e->tok;
    size_t ns = 0, nh = 0;
    if (tok->ignore_merges) {
        int64_t whole = vocab_find(tok, p, n);
        if (whole >= 0)
            return ids_push(e->ids, (uint32_t)whole) ? PX_ERR_NO_MEMORY : PX_OK;
    }
    if (n > e->sym_cap) {
        uint32_t *s = realloc(e->sym, n * sizeof(*s));
        int32_t *nx = s ? realloc(e->next, n * sizeof(*nx)) : NULL;
        int32_t *pv = nx ? realloc(e->prev, n * sizeof(*pv)) : NULL;
        cand_t *h = pv ? realloc(e->heap, 3 * n * sizeof(*h)) : NULL;
        e->sym = s ? s : e->sym;
        e->next = nx ? nx : e->next;
        e->prev = pv ? pv : e->prev;
        e->heap = h ? h : e->heap;
        if (!h)
            return PX_ERR_NO_MEMORY;
        e->sym_cap = n;
    }
    for (size_t i = 0; i < n; i++) {
        int64_t id = tok->byte_id[p[i]];
        if (id < 0)
            id = tok->unk_id; /* tokenizers: unk, or the byte is dropped */
        if (id >= 0)
            e->sym[ns++] = (uint32_t)id;
    }
    for (size_t i = 0; i < ns; i++) {
        e->prev[i] = (int32_t)i - 1;
        e->next[i] = i + 1 < ns ? (int32_t)i + 1 : -1;
    }
    for (size_t i = 0; i + 1 < ns; i++) /* at most ns - 1 + 2 per merge <= 3n pushes */
        push_pair(e, &nh, (int32_t)i);
    while (nh) {
        cand_t c = heap_pop(e->heap, &nh);
        int32_t nx = e->next[c.pos];
        const merge_t *m;
        if (e->prev[c.pos] == -2 || nx < 0)
            continue; /* merged away, or the last symbol now */
        m = merge_find(tok, e->sym[c.pos], e->sym[nx]);
        if (!m || m->id != c.id)
            continue; /* the pair changed since */
        e->sym[c.pos] = c.id;
        e->next[c.pos] = e->next[nx];
        if (e->next[nx] >= 0)
            e->prev[e->next[nx]] = (int32_t)c.pos;
        e->prev[nx] = -2;
        if (e->prev[c.pos] >= 0)
            push_pair(e, &nh, e->prev[c.pos]);
        push_pair(e, &nh, (int32_t)c.pos);
    }
    for (int32_t i = ns ? 0 : -1; i >= 0; i = e->next[i])
        if (ids_push(e->ids, e->sym[i]))
            return PX_ERR_NO_MEMORY;
    return PX_OK;
}

static px_status_t pretokenize(enc_t *e, int step, const uint8_t *p, size_t n);

/* tokenizers' SplitDelimiterBehavior (normalizer.rs split), streamed: the
 * regex yields gaps and matches in order; `pend` is the piece being built,
 * which the next segment either extends or pushes out to step k+1. */
typedef struct {
    enc_t *e;
    int k;
    enum split_behavior behavior;
    const uint8_t *p;
    size_t ps, pe; /* the pending piece [ps, pe) */
    int pmatch;    /* the pending piece is one match (not merged with a gap) */
    int pvalid;
} splitter_t;

static px_status_t seg(splitter_t *sp, size_t s, size_t t, int is_match)
{
    int extend = 0;
    if (sp->behavior == SPLIT_REMOVED && is_match)
        return PX_OK;
    if (sp->pvalid) {
        switch (sp->behavior) {
        case SPLIT_MERGED_PREV: extend = is_match && !sp->pmatch; break;
        case SPLIT_MERGED_NEXT: extend = sp->pmatch && !is_match; break;
        case SPLIT_CONTIGUOUS: extend = is_match && sp->pmatch; break;
        default: break;
        }
    }
    if (extend) {
        sp->pe = t;
        /* merged with a gap, the piece no longer draws a neighbour */
        sp->pmatch = sp->behavior == SPLIT_CONTIGUOUS;
        if (sp->behavior == SPLIT_MERGED_PREV)
            sp->pmatch = 1; /* tokenizers: the next match is not merged again */
        return PX_OK;
    }
    if (sp->pvalid) {
        px_status_t status = pretokenize(sp->e, sp->k + 1, sp->p + sp->ps, sp->pe - sp->ps);
        if (status != PX_OK)
            return status;
    }
    sp->ps = s;
    sp->pe = t;
    sp->pmatch = is_match;
    sp->pvalid = 1;
    return PX_OK;
}

/* step k's regex over one piece: each resulting piece goes to step k+1 */
static px_status_t split_piece(enc_t *e, int k, const uint8_t *p, size_t n)
{
    const step_t *st = &e->tok->steps[k];
    splitter_t sp = {e, k, st->behavior, p, 0, 0, 0, 0};
    size_t off = 0, prev = 0; /* the search's start; the end of the last match */
    int matched = 0;
    px_status_t status;

    while (off <= n) {
        int rc = pcre2_match(st->re, p, n, off, PCRE2_NO_UTF_CHECK, e->md, e->mctx);
        if (rc == PCRE2_ERROR_NOMATCH)
            break;
        if (rc < 0) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(rc, msg, sizeof(msg));
            snprintf(e->errbuf, e->errlen, "tokenizer: pre-tokenizer regex %d failed: %s", k,
                     (const char *)msg);
            return PX_ERR_INTERNAL;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->md);
        size_t s = ov[0], t = ov[1];
        /* Rust's find_iter, as tokenizers runs it: an empty match right
         * where the last match ended does not count; after an empty match
         * the search moves on one character. An empty match still splits
         * (the gap before it is a piece of its own) and counts as a match
         * for the behaviours; the empty piece itself is dropped. */
        if (!(t == s && matched && s == prev)) {
            if (s > prev && (status = seg(&sp, prev, s, 0)) != PX_OK)
                return status;
            if ((status = seg(&sp, s, t, 1)) != PX_OK)
                return status;
            prev = t;
            matched = 1;
        }
        off = t;
        if (t == s) {
            off = s + 1;
            while (off < n && (p[off] & 0xC0) == 0x80)
                off++;
        }
    }
    if (n > prev && (status = seg(&sp, prev, n, 0)) != PX_OK)
        return status;
    if (sp.pvalid)
        return pretokenize(e, k + 1, p + sp.ps, sp.pe - sp.ps);
    return PX_OK;
}

/* pre-tokenizer step `step` onwards over one piece; past the last, BPE */
static px_status_t pretokenize(enc_t *e, int step, const uint8_t *p, size_t n)
{
    const px_tokenizer_t *tok = e->tok;
    if (!n)
        return PX_OK;
    if (step == tok->nsteps)
        return bpe(e, p, n);
    if (tok->steps[step].kind == STEP_SPLIT)
        return split_piece(e, step, p, n);
    /* ByteLevel's add_prefix_space: a space before a piece that has none */
    if (p[0] == ' ')
        return pretokenize(e, step + 1, p, n);
    uint8_t *q = malloc(n + 1);
    if (!q)
        return PX_ERR_NO_MEMORY;
    q[0] = ' ';
    memcpy(q + 1, p, n);
    px_status_t status = pretokenize(e, step + 1, q, n + 1);
    free(q);
    return status;
}

/* Cuts the added tokens of one group (pass 0: not normalized, pass 1:
 * normalized; tokenizers' AddedVocabulary does the two in this order) out
 * of [p, p+n), leftmost-longest; the gaps go to the next pass, and after
 * pass 1 to the pre-tokenizer. */
static px_status_t added_split(enc_t *e, int pass, const uint8_t *p, size_t n)
{
    const px_tokenizer_t *tok = e->tok;
    size_t gap = 0;
    px_status_t status;
    if (pass == 2)
        return pretokenize(e, 0, p, n);
    for (size_t i = 0; i < n && tok->nadded; i++) {
        const added_t *best = NULL;
        if (!tok->added_first[p[i]])
            continue;
        for (size_t a = 0; a < tok->nadded; a++) {
            const added_t *t = &tok->added[a];
            if (t->normalized != pass || t->len > n - i || (best && t->len <= best->len))
                continue;
            if (!memcmp(p + i, t->bytes, t->len))
                best = t;
        }
        if (!best)
            continue;
        if ((status = added_split(e, pass + 1, p + gap, i - gap)) != PX_OK)
            return status;
        if (ids_push(e->ids, best->id))
            return PX_ERR_NO_MEMORY;
        gap = i + best->len;
        i = gap - 1;
    }
    return added_split(e, pass + 1, p + gap, n - gap);
}

px_status_t px_tokenizer_encode(const px_tokenizer_t *tok, const char *text, size_t len,
                                px_token_ids_t *ids, char *errbuf, size_t errlen)
{
    enc_t e = {.tok = tok, .ids = ids, .errbuf = errbuf, .errlen = errlen};
    pcre2_jit_stack *stack = NULL;
    px_status_t status = PX_ERR_NO_MEMORY;
    int rc;

    e.md = pcre2_match_data_create(16, NULL);
    e.mctx = pcre2_match_context_create(NULL);
    stack = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, NULL);
    if (!e.md || !e.mctx || !stack)
        goto out;
    pcre2_jit_stack_assign(e.mctx, NULL, stack);
    /* one UTF-8 check of the whole text; the regexes then skip theirs */
    rc = pcre2_match(tok->utf_check, (PCRE2_SPTR)text, len, 0, 0, e.md, NULL);
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(rc, msg, sizeof(msg));
        snprintf(errbuf, errlen, "text is not valid UTF-8 at byte %zu: %s",
                 (size_t)pcre2_get_startchar(e.md), (const char *)msg);
        status = PX_ERR_INVALID_ARGUMENT;
        goto out;
    }
    status = added_split(&e, 0, (const uint8_t *)text, len);
    if (status == PX_ERR_NO_MEMORY)
        snprintf(errbuf, errlen, "tokenizer: out of memory");
out:
    free(e.sym);
    free(e.next);
    free(e.prev);
    free(e.heap);
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(e.mctx);
    pcre2_match_data_free(e.md);
    return status;
}

/* ---- decoding ---- */

const uint8_t *px_tokenizer_token_bytes(const px_tokenizer_t *tok, uint32_t id, size_t *len_p)
{
    if (id >= tok->vocab_size || !tok->id_bytes[id])
        return NULL;
    *len_p = tok->id_len[id];
    return tok->id_bytes[id];
}

px_status_t px_tokenizer_decode(const px_tokenizer_t *tok, const uint32_t *ids, size_t n,
                                char **text_p, size_t *len_p, char *errbuf, size_t errlen)
{
    size_t total = 0, len, at = 0;
    char *text;
    for (size_t i = 0; i < n; i++) {
        if (!px_tokenizer_token_bytes(tok, ids[i], &len)) {
            snprintf(errbuf, errlen, "decode: id %u (index %zu) is not in the tokenizer "
                     "(vocab size %u)", ids[i], i, tok->vocab_size);
            return PX_ERR_INVALID_ARGUMENT;
        }
        total += len;
    }
    text = malloc(total + 1);
    if (!text) {
        snprintf(errbuf, errlen, "decode: out of memory (%zu bytes)", total + 1);
        return PX_ERR_NO_MEMORY;
    }
    for (size_t i = 0; i < n; i++) {
        const uint8_t *b = px_tokenizer_token_bytes(tok, ids[i], &len);
        memcpy(text + at, b, len);
        at += len;
    }
    text[total] = '\0';
    *text_p = text;
    *len_p = total;
    return PX_OK;
}

/* ---- chunks for parallel encoding ---- */

static int graphic(uint8_t c) { return c > ' ' && c < 0x7F; }

size_t px_tokenizer_chunk_end(const px_tokenizer_t *tok, const char *text, size_t len,
                              size_t start, size_t want)
{
    const uint8_t *p = (const uint8_t *)text;
    size_t i;
    if (!tok->chunkable || want >= len - start)
        return len;
    /* "X\nY": GPT-2's and Llama 3's regexes make "\n" a piece of its own
     * there (or the end of X's punctuation run) and start the next piece at
     * Y whether or not Y is in the subject, and no added token spans it */
    for (i = start + want; i + 1 < len; i++) {
        const uint8_t *nl = memchr(p + i, '\n', len - i - 1);
        if (!nl)
            return len;
        i = (size_t)(nl - p);
        if (i > start && graphic(p[i - 1]) && graphic(p[i + 1]))
            return i + 1;
    }
    return len;
}

int px_tokenizer_sidecar_path(const char *data_path, char *buf, size_t len)
{
    const char *base = strrchr(data_path, '/');
    base = base ? base + 1 : data_path;
    const char *dot = strrchr(base, '.');
    size_t stem = dot && dot != base ? (size_t)(dot - data_path) : strlen(data_path);
    int n = snprintf(buf, len, "%.*s.tokenizer.json", (int)stem, data_path);
    return n < 0 || (size_t)n >= len ? -1 : 0;
}
