/* fuzz-kventry.c - libFuzzer target: arbitrary bytes as a context-cache entry file
 * (libcore/kvstore). The reader must refuse or accept with a message, never read or
 * allocate beyond what the file can hold; an accepted entry's arrays are walked whole. */
#include "kvstore/kvstore.h"

#include <fcntl.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char path[64];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct capy_kv_entry *en;
	struct capy_kv_file_info fi;
	struct capy_err err = { 0 };
	int fd;

	if (!path[0])
		snprintf(path, sizeof(path), "/tmp/fuzz-kventry-%d.capykv", (int)getpid());
	if ((fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600)) < 0)
		return 0;
	if (write(fd, data, size) != (ssize_t)size) {
		close(fd);
		return 0;
	}
	close(fd);
	for (int flags = 0; flags < 2; flags++) {
		if (capy_kv_entry_read(path, NULL, flags ? CAPY_KV_READ_TOKENS : 0, &en, &fi, &err) < 0) {
			if (!err.msg[0])
				__builtin_trap();
			capy_kv_file_info_free(&fi);
			continue;
		}
		volatile uint64_t sum = 0;
		for (uint64_t i = 0; i < en->n_tokens; i++)
			sum += (uint32_t)en->tokens[i];
		for (uint32_t i = 0; i < en->n_snaps; i++)
			if (en->snap_pos[i] > en->n_tokens)
				__builtin_trap();
		if (!flags) {
			uint64_t pb = capy_kv_entry_pages(en) * en->id.page_bytes;
			for (uint64_t i = 0; i < pb; i += 4096)
				sum += en->pages[i];
			for (uint64_t i = 0; i < (uint64_t)en->n_snaps * en->id.state_bytes; i += 4096)
				sum += en->states[i];
		}
		capy_kv_entry_free(en);
		capy_kv_file_info_free(&fi);
	}
	unlink(path);
	return 0;
}
