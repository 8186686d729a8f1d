/* data.h: token files in the llm.c / nanoGPT layout, and the global batch.
 *
 * File: a header of 256 little-endian int32 (magic 20240520, version 1 or
 * 2, token count, the tokenizer's vocab size or 0 when not recorded, rest
 * 0), then `count` tokens: uint16 (version 1, llm.c's GPT-2 files) or
 * uint32 (version 2: a vocab past 65,536). Nothing else. llm.c's Llama 3
 * files (magic 20240801, version 7, uint32 tokens) are read too.
 *
 * Batches: sequence i (0 <= i < B) of step s (0-based) starts at offset
 * px_data_offset(seed, s, i, ntok, T) in [0, ntok - T - 1], a counter-based
 * function of (seed, s, i) only, so every layout (any dp, any rank) cuts the
 * same global batch; inputs are tokens[off, off+T), targets tokens[off+1,
 * off+T+1). A rank of dp takes sequences [r*B/dp, (r+1)*B/dp). */
#ifndef PX_DATA_H
#define PX_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "px_status.h"

#define PX_DATA_MAGIC 20240520
#define PX_DATA_VERSION 1     /* uint16 tokens */
#define PX_DATA_VERSION_U32 2 /* uint32 tokens: a vocab past 65,536 */
/* llm.c's Llama 3 files (dev/data/data_common.py): their own magic, version
 * 7, uint32 tokens; read as version 2 is */
#define PX_DATA_MAGIC_LLMC_U32 20240801
#define PX_DATA_VERSION_LLMC_U32 7
#define PX_DATA_HEADER_INTS 256

typedef struct px_data px_data_t;

/* Maps `path` read-only and validates it: header magic and version, file
 * size = 1024 + 2*count (version 1) or 4*count (version 2) bytes, count >=
 * 1, the recorded tokenizer vocab (header[3], 0: none) <= vocab ("data file
 * F: tokenized with vocab 50257 (header), larger than the job's vocab
 * 4096"), every token < vocab (a token >=
 * vocab is named with the largest token: "data file F: token 300 >= vocab
 * 256 (largest token 300; ...)"). On failure writes a message naming the
 * file and the bad value into errbuf (may be NULL) and returns PX_ERR_NOT_FOUND (cannot open), PX_ERR_IO (read/map
 * error) or PX_ERR_INVALID_ARGUMENT (bad content). */
px_status_t px_data_open(const char *path, int vocab, char *errbuf, size_t errlen,
                         px_data_t **data_p);
void px_data_close(px_data_t *data); /* NULL no-op */

/* The tokenizer vocab a token file records (header[3]; pctl data prepare
 * --tokenizer writes it), read from its header alone: 0 when the file
 * records none (the byte tokenizer's, llm.c's), cannot be read or is not a
 * token file (px_data_open says why). */
int px_data_header_vocab(const char *path);

/* Number of tokens in the file. */
size_t px_data_num_tokens(const px_data_t *data);
/* Bytes per token: 2 (version 1) or 4 (version 2). */
int px_data_token_bytes(const px_data_t *data);
/* The tokens (borrowed until close): px_data_tokens for a 2-byte file,
 * px_data_tokens32 for a 4-byte one; the other returns NULL. */
const uint16_t *px_data_tokens(const px_data_t *data);
const uint32_t *px_data_tokens32(const px_data_t *data);

/* Start offset of sequence i of step s; requires ntok >= T + 1. */
size_t px_data_offset(uint64_t seed, int step, int i, size_t ntok, int T);

/* Fills inputs and targets (count, T) int32 with sequences [first,
 * first+count) of step `step` (0-based). Requires ntok >= T + 1. */
void px_data_batch(const px_data_t *data, uint64_t seed, int step, int first, int count, int T,
                   int32_t *inputs, int32_t *targets);

#endif
