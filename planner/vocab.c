/* vocab.c: the padded vocab of the model (jobcfg.h), the one rule that
 * pctl plan, the daemon, the planner's byte counts and the engine share.
 * Pure arithmetic; any thread. */
#include "jobcfg.h"

int px_job_config_padded_vocab(int vocab)
{
    if (vocab <= 0)
        return vocab;
    /* llm.c: 50257 -> 50304, so the LM head's rows are a multiple of 64 */
    return (vocab + PX_VOCAB_PAD - 1) / PX_VOCAB_PAD * PX_VOCAB_PAD;
}
