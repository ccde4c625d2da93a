/* backend_selfcheck.h — the start-up self-check of `--backend auto`. */
#ifndef RGPU_BACKEND_SELFCHECK_H
#define RGPU_BACKEND_SELFCHECK_H

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Runs a fixed set of small ops (every op family) on cand and on the cpu
 * reference and compares the outputs at per-dtype tolerances. true when all
 * agree (why: a summary); false with why = "<op name>: <what differed or
 * failed>" for the first op that did not. cand is left usable either way. */
bool rgpu_backend_selfcheck(rgpu_backend *cand, char *why, size_t whylen);

#ifdef __cplusplus
}
#endif
#endif
