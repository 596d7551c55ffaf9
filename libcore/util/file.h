/* file.h - file I/O with errors that name the file and offset.
 *
 * Whole small files (configs, templates), full-length pread/pwrite that retry
 * short transfers and EINTR, read-only mappings, and an output file that is
 * written under a temporary name and renamed into place only when complete, so
 * an interrupted or failed run never leaves a half-written file at the target.
 */
#ifndef CAPY_UTIL_FILE_H
#define CAPY_UTIL_FILE_H

#include "err.h"

#include <sys/types.h>

/* Read all of path into a NUL-terminated malloc'd buffer; fails if larger than max. */
int capy_read_file(const char *path, size_t max, char **out, size_t *len, struct capy_err *err);

/* Read exactly len bytes at off; a short file is a CAPY_EFORMAT error naming the offset. */
int capy_pread_full(int fd, void *buf, size_t len, uint64_t off, const char *path,
		    struct capy_err *err);
/* Write exactly len bytes at off. */
int capy_pwrite_full(int fd, const void *buf, size_t len, uint64_t off, const char *path,
		     struct capy_err *err);

/* A read-only mapping of a whole file. */
struct capy_map {
	const uint8_t *data;
	uint64_t size;
	int fd;
};

int capy_map_open(struct capy_map *m, const char *path, struct capy_err *err);
void capy_map_close(struct capy_map *m);

/* An output file written under a temporary name beside the target. */
struct capy_outfile {
	int fd;
	char *path;     /* the final name */
	char *tmp_path; /* "<dir>/.<base>.tmp.XXXXXX" while open, NULL after commit/abort */
};

/* Create the temporary file; the target is not touched until capy_outfile_commit. A failure
 * leaves nothing to free or remove. */
int capy_outfile_open(struct capy_outfile *o, const char *path, struct capy_err *err);
/* Make the file exactly size bytes (sparse); reserves nothing on disk. */
int capy_outfile_truncate(struct capy_outfile *o, uint64_t size, struct capy_err *err);
/* fsync, rename over the target, fsync the directory. On failure the temp file is removed. */
int capy_outfile_commit(struct capy_outfile *o, struct capy_err *err);
/* Remove the temporary file (safe to call after commit; then it does nothing). */
void capy_outfile_abort(struct capy_outfile *o);

/* Size of an open file or a path. */
int capy_file_size(const char *path, uint64_t *size, struct capy_err *err);

/* Join a directory and a file name into a malloc'd path (NULL on OOM). */
char *capy_path_join(const char *dir, const char *name);

#endif
