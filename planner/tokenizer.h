/* tokenizer.h: byte-level BPE tokenizers read from a Hugging Face
 * `tokenizers` file (tokenizer.json), as GPT-2 and Llama 3 ship them.
 *
 * What a file may hold (anything else is refused at load, naming the field):
 *   model:         {"type": "BPE", "vocab": {token: id}, "merges": ["a b" |
 *                  ["a", "b"]], "ignore_merges", "unk_token"}; no dropout, no
 *                  continuing_subword_prefix / end_of_word_suffix, no
 *                  byte_fallback.
 *   pre_tokenizer: ByteLevel (add_prefix_space, use_regex: GPT-2's regex), or
 *                  a Sequence of Split (a regex or a literal; behavior
 *                  Removed, Isolated, MergedWithPrevious, MergedWithNext or
 *                  Contiguous; invert false) ending in ByteLevel. Without
 *                  ByteLevel the model is not byte-level and is refused.
 *   normalizer:    none.
 *   decoder:       none or ByteLevel.
 *   added_tokens:  matched in the text before pre-tokenization (leftmost
 *                  longest; the non-normalized ones first, then the
 *                  normalized ones in the gaps, as tokenizers'
 *                  AddedVocabulary does); lstrip, rstrip, single_word false.
 * The post_processor (a BOS the template would add) is not applied: ids are
 * those of tokenizers' `encode(text, add_special_tokens=False)`.
 *
 * Regexes are PCRE2's (UTF and UCP, so \p{L}, \p{N} and \s are Unicode; JIT
 * where the library has it). Text must be valid UTF-8. A loaded tokenizer
 * is read-only: any number of threads may encode and decode at once. */
#ifndef PX_TOKENIZER_H
#define PX_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "px_status.h"

typedef struct px_tokenizer px_tokenizer_t;

/* A growable array of token ids; zero-initialise, free with
 * px_token_ids_free. */
typedef struct {
    uint32_t *ids;
    size_t len, cap;
} px_token_ids_t;

void px_token_ids_free(px_token_ids_t *ids); /* frees ids->ids, zeroes *ids */

/* Reads and checks the tokenizer file at `path`. On failure writes a
 * message naming the file and the bad field ("tokenizer t.json: model.type
 * 'WordPiece' is not supported (byte-level BPE only)") into errbuf and
 * returns PX_ERR_NOT_FOUND (cannot open), PX_ERR_INVALID_ARGUMENT (bad JSON
 * or content) or PX_ERR_NO_MEMORY. Caller destroys *tok_p. */
px_status_t px_tokenizer_load(const char *path, char *errbuf, size_t errlen,
                              px_tokenizer_t **tok_p);
void px_tokenizer_destroy(px_tokenizer_t *tok); /* NULL no-op */

/* 1 + the largest id of the vocab and the added tokens: the job's --vocab
 * (tokenizers' get_vocab_size(with_added_tokens=True) when ids are dense). */
uint32_t px_tokenizer_vocab_size(const px_tokenizer_t *tok);

/* Appends the ids of `len` bytes of UTF-8 `text` to *ids. Errors:
 * PX_ERR_INVALID_ARGUMENT (text not UTF-8: the message names the byte
 * offset), PX_ERR_NO_MEMORY, PX_ERR_INTERNAL (a regex failure, named). *ids
 * keeps what was appended before a failure. */
px_status_t px_tokenizer_encode(const px_tokenizer_t *tok, const char *text, size_t len,
                                px_token_ids_t *ids, char *errbuf, size_t errlen);

/* The bytes of token `id` (an added token's content, or the bytes a
 * byte-level vocab entry stands for; may be part of a UTF-8 character),
 * borrowed until destroy; NULL (and *len_p untouched) for an id the
 * tokenizer does not have. */
const uint8_t *px_tokenizer_token_bytes(const px_tokenizer_t *tok, uint32_t id, size_t *len_p);

/* The text of `n` ids: the concatenation of their bytes, NUL-terminated
 * (the NUL not counted in *len_p); caller frees *text_p. An id the
 * tokenizer does not have is PX_ERR_INVALID_ARGUMENT naming it and its
 * index. decode(encode(x)) == x for every UTF-8 x whose bytes all have a
 * token (always so when the vocab holds the 256 byte symbols). */
px_status_t px_tokenizer_decode(const px_tokenizer_t *tok, const uint32_t *ids, size_t n,
                                char **text_p, size_t *len_p, char *errbuf, size_t errlen);

/* The end of a chunk of text[0, len) that starts at `start` and holds about
 * `want` bytes, such that encoding the chunks separately and concatenating
 * gives the ids of encoding text[0, len) whole: a line end "X\nY" with X and
 * Y printable ASCII, where neither GPT-2's nor Llama 3's pre-tokenizer
 * regex lets a piece or a lookahead cross. Returns len when there is no
 * such point after start + want, or when the tokenizer's pieces could
 * cross one (another regex, add_prefix_space, an added token holding a
 * newline): then the text is one chunk. */
size_t px_tokenizer_chunk_end(const px_tokenizer_t *tok, const char *text, size_t len,
                              size_t start, size_t want);

/* The tokenizer file that belongs to the token file `data_path`, beside it:
 * its name with the last extension replaced, "dir/book.bin" ->
 * "dir/book.tokenizer.json" (no extension: appended). pctl data prepare
 * --tokenizer copies the tokenizer there; sampling a model trained on the
 * file reads it from there, as nanoGPT's sample.py reads the meta.pkl
 * beside its train.bin. Into buf (len bytes); -1 when it does not fit. */
int px_tokenizer_sidecar_path(const char *data_path, char *buf, size_t len);

#endif
