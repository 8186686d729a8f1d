/* safetensors.h: reading a safetensors file's header (the format of
 * Hugging Face's `safetensors`: an 8-byte little-endian header length N,
 * N bytes of JSON {name: {"dtype", "shape", "data_offsets": [begin,
 * end]}, "__metadata__": {...}}, then the data; offsets count from the
 * end of the header).
 *
 * The one reader of such headers: the Hugging Face GPT-2 description
 * (hfgpt2.h) and sampling's read of parallax's own export
 * (engine/sample.h) both go through it. The JSON is jansson's. Pure code;
 * any thread. */
#ifndef PX_SAFETENSORS_H
#define PX_SAFETENSORS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "px_status.h"

/* The most dims px_safetensors_entry reads (parallax's stacked tensors
 * have 3). */
#define PX_SAFETENSORS_MAX_DIMS 4

/* A file's header: the JSON object (*hdr_p, a new reference: the caller
 * json_decref's it), the data's start (*data_p, bytes from the start of
 * the file) and the file's size (*file_bytes_p). Errors, written into err
 * naming the file: PX_ERR_NOT_FOUND (no such file), PX_ERR_IO,
 * PX_ERR_INVALID_ARGUMENT (too short, a header length that does not fit
 * the file or is past 64 MiB, a header that is not a JSON object),
 * PX_ERR_NO_MEMORY. */
px_status_t px_safetensors_header(const char *path, json_t **hdr_p, uint64_t *data_p,
                                  uint64_t *file_bytes_p, char *err, size_t errlen);

/* Tensor `name` of the header: F32, 1..max_dims dims (each 1..2^30) into
 * shape[] and *ndim, its data_offsets into *begin and *end (begin <= end,
 * end - begin = 4 x the shape's elements, end inside the data of a file
 * of file_bytes bytes whose data starts at data). 0, or -1 with err naming
 * the file, the tensor and what is wrong (missing: "FILE has no tensor
 * NAME"). */
int px_safetensors_entry(json_t *hdr, const char *file, const char *name, int max_dims,
                         int *ndim, long long shape[PX_SAFETENSORS_MAX_DIMS], uint64_t data,
                         uint64_t file_bytes, uint64_t *begin, uint64_t *end, char *err,
                         size_t errlen);

#endif
