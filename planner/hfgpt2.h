/* hfgpt2.h: a Hugging Face `transformers` GPT-2 checkpoint, described.
 *
 * What GPT2LMHeadModel.save_pretrained(DIR) writes: DIR/config.json
 * (n_layer, n_head, n_embd, n_positions, vocab_size, ...) and
 * DIR/model.safetensors (8-byte little-endian header length, a JSON header
 * naming each tensor's dtype, shape and data_offsets, then the data). Its
 * tensors map one to one onto parallax's canonical layout (model.h):
 *   wte.weight (V,C)             wte (Vp,C): rows [V, Vp) are padding, 0
 *   wpe.weight (P,C)             wpe (maxT,C)
 *   h.<l>.ln_1.weight / .bias    ln1w / ln1b [l]
 *   h.<l>.attn.c_attn.weight     qkvw [l] (3C,C), stored (C,3C)
 *   h.<l>.attn.c_attn.bias       qkvb [l]
 *   h.<l>.attn.c_proj.weight     attprojw [l] (C,C), stored transposed
 *   h.<l>.attn.c_proj.bias       attprojb [l]
 *   h.<l>.ln_2.weight / .bias    ln2w / ln2b [l]
 *   h.<l>.mlp.c_fc.weight        fcw [l] (4C,C), stored (C,4C)
 *   h.<l>.mlp.c_fc.bias          fcb [l]
 *   h.<l>.mlp.c_proj.weight      fcprojw [l] (C,4C), stored (4C,C)
 *   h.<l>.mlp.c_proj.bias        fcprojb [l]
 *   ln_f.weight / .bias          lnfw / lnfb
 * GPT-2's Conv1D keeps its weight as (in, out), the transpose of
 * torch.nn.Linear's (out, in) that the canonical layout uses (Radford et
 * al.'s TensorFlow layout, kept by transformers' modeling_gpt2.py). The
 * names may carry the prefix "transformer." (GPT2LMHeadModel's own save)
 * or not (GPT2Model's, and the hub's gpt2 file); lm_head.weight, where
 * present, is the tied wte; the attention's mask buffers (attn.bias,
 * attn.masked_bias) are ignored. Only float32 data is read.
 *
 * Pure code (jansson; no engine): pctl and the daemon check a job's flags
 * against a checkpoint at submit with it, the engine reads its tensors
 * through it (engine/hf_gpt2.h). Any thread. */
#ifndef PX_HFGPT2_H
#define PX_HFGPT2_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "px_status.h"

/* Where one canonical tensor's slice lies in the file. */
typedef struct px_hf_gpt2_tensor {
    uint64_t offset; /* bytes from the start of the file to its float32 data */
    int rows, cols;  /* as stored (the transpose of the canonical slice when
                        transposed) */
    int transposed;  /* 1: a Conv1D weight, stored (in, out) */
} px_hf_gpt2_tensor_t;

/* A checkpoint, opened: its dims and its tensors' places. */
typedef struct px_hf_gpt2 {
    char file[4096];  /* the safetensors file */
    uint64_t file_bytes;
    int layers, dim, positions, vocab; /* from the tensors' shapes */
    int heads;        /* config.json's n_head; 0 where there is none (a bare
                         safetensors file: the weights do not say) */
    int prefixed;     /* the names carry "transformer." */
    int has_lm_head;  /* lm_head.weight is in the file (offset lm_head) */
    uint64_t lm_head;
    /* [PX_MODEL_NUM_TENSORS * layers]: canonical tensor i's layer l at
     * i * layers + l (tensors without layers at l = 0) */
    px_hf_gpt2_tensor_t *t;
} px_hf_gpt2_t;

/* Opens `path`: a directory holding config.json and model.safetensors, or
 * a .safetensors file (config.json beside it is read when there is one).
 * Checks the header (every tensor F32, its shape the one the dims imply,
 * its bytes inside the file) and config.json's GPT-2 math against
 * parallax's (activation gelu_new, the tanh approximation; LayerNorm eps
 * 1e-5; n_inner 4 n_embd; attention scaled by 1/sqrt(head size) only; a
 * tied head); reads no tensor data. Errors, written into err naming the
 * file and the value: PX_ERR_NOT_FOUND (no such file),
 * PX_ERR_INVALID_ARGUMENT (not such a checkpoint, other math),
 * PX_ERR_IO, PX_ERR_NO_MEMORY. On success px_hf_gpt2_close frees it. */
px_status_t px_hf_gpt2_open(const char *path, px_hf_gpt2_t *hf, char *err, size_t errlen);
void px_hf_gpt2_close(px_hf_gpt2_t *hf);

/* The checkpoint against a job's model: layers, heads (where known), dim,
 * positions against seq, vocab. PX_ERR_INVALID_ARGUMENT naming both values
 * ("init_from '...' has n_embd=768, the job dim=512"). */
px_status_t px_hf_gpt2_check(const px_hf_gpt2_t *hf, const px_model_config_t *cfg, int heads,
                             char *err, size_t errlen);

/* The Hugging Face name of canonical tensor i (layer l where it has
 * layers) into buf, with the "transformer." prefix when prefixed; returns
 * 1 when the file stores it transposed (a Conv1D weight), 0 when not, -1
 * for a tensor without a name. */
int px_hf_gpt2_name(int i, int l, int prefixed, char *buf, size_t len);

#endif
