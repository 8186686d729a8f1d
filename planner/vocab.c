/* vocab.c: the model's padded vocab (jobcfg.h). A minimal version so the
 * planner links; the full one (with its own tests) replaces it at merge. */
#include "jobcfg.h"

int px_job_config_padded_vocab(int v)
{
    return (v + PX_VOCAB_PAD - 1) / PX_VOCAB_PAD * PX_VOCAB_PAD;
}
