/* identity.c - a model's identity for capy-gate references (gate.h). */
#include "gate.h"
#include "../artifact/artifact.h"
#include "../util/hash.h"

int capy_gate_identity(const struct capy_artifact *a, struct capy_gate_identity *out, struct capy_err *err)
{
	struct capy_hasher *h = capy_hasher_new();

	if (!h)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");

	snprintf(out->family, sizeof(out->family), "%s", a->family ? a->family : "?");
	{
		/* name, NUL, checksum (8 bytes little-endian order of the value): a tensor renamed
		 * or changed changes the identity */
		for (size_t i = 0; i < a->ntensors; i++) {
			capy_hasher_update(h, a->tensors[i].name, strlen(a->tensors[i].name) + 1);
			capy_hasher_update(h, &a->tensors[i].xxh3, sizeof(uint64_t));
		}
		for (size_t i = 0; i < a->nfiles; i++) {
			capy_hasher_update(h, a->files[i].name, strlen(a->files[i].name) + 1);
			capy_hasher_update(h, &a->files[i].xxh3, sizeof(uint64_t));
		}
	}
	capy_hash_hex(capy_hasher_digest(h), out->weights_xxh3);
	capy_hasher_free(h);
	return 0;
}
