/* engine-impl.h - what engine.c and seq.c share: the page pool and the sequence helpers the
 * step uses. Include only inside libcore/engine/. */
#ifndef CAPY_ENGINE_IMPL_H
#define CAPY_ENGINE_IMPL_H

#include "backend.h"

/* The page pool (engine.c): a new page held once (the lowest free id), one more holder, one
 * less (the last release frees the id for reuse; the backend keeps its storage until
 * engine_pages_trim gives back what lies above the highest id in use and above
 * capy_engine_reserve's pages, where the backend can: at the end of a sequence). */
int engine_page_alloc(struct capy_engine *e, uint32_t *id, struct capy_err *err);
void engine_page_hold(struct capy_engine *e, uint32_t id);
void engine_page_drop(struct capy_engine *e, uint32_t id);
void engine_pages_trim(struct capy_engine *e);

/* seq.c: give s pages for its next n tokens that it alone holds (copying a shared page
 * before it is written), and room in its history for n more ids. */
int seq_make_writable(struct capy_seq *s, uint64_t n, struct capy_err *err);
/* The same for positions [from, from + n), from <= len (the MTP head's rows). */
int seq_make_writable_at(struct capy_seq *s, uint64_t from, uint64_t n, struct capy_err *err);
int seq_reserve_history(struct capy_seq *s, uint64_t n, struct capy_err *err);

#endif
