/* moe-grouped.h - private to kernels/: the grouped routed experts (moe-grouped.cu) that moe.cu
 * runs for the slots of prefill rows. CUDA C++. */
#ifndef CAPY_KERNELS_MOE_GROUPED_H
#define CAPY_KERNELS_MOE_GROUPED_H

#include "linear-impl.h"

#define CAPY_MAX_U64(a, b) ((uint64_t)(a) > (uint64_t)(b) ? (uint64_t)(a) : (uint64_t)(b))

/* The grouped experts' workspace: the slots' quantized activations as exact BF16
 * [nparts][S][k] and their global scales, the per-expert counts and fill cursors, the slot
 * list by expert, the tiles ([3] = expert, first list index, slots) and their count. */
struct moe_grouped_ws {
	uint16_t *xb;
	float *gs;
	int32_t *cnt, *cursor, *list, *tiles;
	uint32_t *ntiles;
};

/* Whether a stack can run grouped (NVFP4, k a multiple of 32, 8-byte aligned codes). */
bool moe_grouped_ok(const struct lin_mat *w);
uint64_t moe_grouped_max_tiles(uint64_t slots, uint64_t E);
size_t moe_grouped_ws_bytes(const struct lin_mat *gu, const struct lin_mat *dn, uint64_t S, uint64_t E);
struct moe_grouped_ws moe_grouped_carve(const struct lin_mat *gu, const struct lin_mat *dn, uint64_t S, uint64_t E,
					void *ws);
/* Count, plan and list the grouped slots (rows t with grouped[t]) of T rows of k slots. */
int moe_grouped_plan(struct moe_grouped_ws *g, const int32_t *ids, const uint8_t *grouped, uint64_t T, uint64_t k,
		     uint64_t E, cudaStream_t st);
/* y[s] = the expert's linear of the quantized row s, for every listed slot s (Sg of the S
 * slots); a holds the rows (xb) and scales (gs) for all S slots' indexes. */
int moe_grouped_linear(const struct moe_grouped_ws *g, const struct lin_mat *w, const struct lin_act *a, uint64_t S,
		       uint64_t Sg, uint64_t E, float *y, uint64_t ldy, cudaStream_t st);

#endif
