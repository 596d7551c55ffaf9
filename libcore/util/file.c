/* file.c - file I/O with errors that name the file and offset (see file.h). */
#include "file.h"

#include <fcntl.h>
#include <libgen.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int capy_read_file(const char *path, size_t max, char **out, size_t *len, struct capy_err *err)
{
	struct stat st;
	char *buf;
	int fd, rc;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return capy_err_errno(err, errno, "cannot open '%s'", path);
	if (fstat(fd, &st) < 0) {
		rc = capy_err_errno(err, errno, "cannot stat '%s'", path);
		close(fd);
		return rc;
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		return capy_err_set(err, CAPY_EIO, "'%s' is not a regular file", path);
	}
	if ((uint64_t)st.st_size > max) {
		close(fd);
		return capy_err_set(err, CAPY_EFORMAT, "'%s' is too large (%" PRIu64 " bytes, limit %zu)",
				    path, (uint64_t)st.st_size, max);
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		close(fd);
		return capy_err_set(err, CAPY_ENOMEM, "out of memory reading '%s'", path);
	}
	rc = capy_pread_full(fd, buf, (size_t)st.st_size, 0, path, err);
	close(fd);
	if (rc < 0) {
		free(buf);
		return rc;
	}
	buf[st.st_size] = '\0';
	*out = buf;
	if (len)
		*len = (size_t)st.st_size;
	return 0;
}

int capy_pread_full(int fd, void *buf, size_t len, uint64_t off, const char *path,
		    struct capy_err *err)
{
	uint8_t *p = buf;

	while (len) {
		ssize_t n = pread(fd, p, len, (off_t)off);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return capy_err_errno(err, errno, "cannot read '%s' at offset %" PRIu64, path, off);
		}
		if (n == 0)
			return capy_err_set(err, CAPY_EFORMAT,
					    "'%s' is truncated: %zu bytes missing at offset %" PRIu64,
					    path, len, off);
		p += n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

int capy_pwrite_full(int fd, const void *buf, size_t len, uint64_t off, const char *path,
		     struct capy_err *err)
{
	const uint8_t *p = buf;

	while (len) {
		ssize_t n = pwrite(fd, p, len, (off_t)off);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return capy_err_errno(err, errno, "cannot write '%s' at offset %" PRIu64, path, off);
		}
		if (n == 0)
			return capy_err_errno(err, ENOSPC, "cannot write '%s' at offset %" PRIu64, path, off);
		p += n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

int capy_map_open(struct capy_map *m, const char *path, struct capy_err *err)
{
	struct stat st;
	void *p;
	int rc;

	memset(m, 0, sizeof(*m));
	m->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (m->fd < 0)
		return capy_err_errno(err, errno, "cannot open '%s'", path);
	if (fstat(m->fd, &st) < 0) {
		rc = capy_err_errno(err, errno, "cannot stat '%s'", path);
		goto fail;
	}
	if (!S_ISREG(st.st_mode)) {
		rc = capy_err_set(err, CAPY_EIO, "'%s' is not a regular file", path);
		goto fail;
	}
	m->size = (uint64_t)st.st_size;
	if (m->size) {
		p = mmap(NULL, m->size, PROT_READ, MAP_SHARED, m->fd, 0);
		if (p == MAP_FAILED) {
			rc = capy_err_errno(err, errno, "cannot map '%s'", path);
			goto fail;
		}
		m->data = p;
	}
	return 0;
fail:
	close(m->fd);
	m->fd = -1;
	return rc;
}

void capy_map_close(struct capy_map *m)
{
	if (m->data)
		munmap((void *)m->data, m->size);
	if (m->fd >= 0)
		close(m->fd);
	m->data = NULL;
	m->fd = -1;
}

int capy_file_size(const char *path, uint64_t *size, struct capy_err *err)
{
	struct stat st;

	if (stat(path, &st) < 0)
		return capy_err_errno(err, errno, "cannot stat '%s'", path);
	*size = (uint64_t)st.st_size;
	return 0;
}

char *capy_path_join(const char *dir, const char *name)
{
	size_t a = strlen(dir), b = strlen(name);
	char *p = malloc(a + b + 2);

	if (!p)
		return NULL;
	memcpy(p, dir, a);
	if (a && dir[a - 1] != '/')
		p[a++] = '/';
	memcpy(p + a, name, b + 1);
	return p;
}

/* The directory part of path ("." if none), malloc'd. */
static char *dir_of(const char *path)
{
	char *copy = strdup(path), *d;

	if (!copy)
		return NULL;
	d = strdup(dirname(copy));
	free(copy);
	return d;
}

int capy_outfile_open(struct capy_outfile *o, const char *path, struct capy_err *err)
{
	char *copy, *dir, *base;
	size_t n;

	memset(o, 0, sizeof(*o));
	o->fd = -1;
	o->path = strdup(path);
	copy = strdup(path);
	dir = dir_of(path);
	if (!o->path || !copy || !dir) {
		free(copy);
		free(dir);
		free(o->path);
		o->path = NULL;
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	}
	base = basename(copy);
	n = strlen(dir) + strlen(base) + 32;
	o->tmp_path = malloc(n);
	if (!o->tmp_path) {
		free(copy);
		free(dir);
		free(o->path);
		o->path = NULL;
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	}
	snprintf(o->tmp_path, n, "%s/.%s.tmp.XXXXXX", dir, base);
	free(copy);
	free(dir);
	o->fd = mkostemp(o->tmp_path, O_CLOEXEC);
	if (o->fd < 0) {
		int rc = capy_err_errno(err, errno, "cannot create a temporary file for '%s'", path);
		free(o->tmp_path);
		o->tmp_path = NULL;
		free(o->path);
		o->path = NULL;
		return rc;
	}
	/* mkostemp creates 0600; an artifact is an ordinary file. */
	mode_t mask = umask(0);
	umask(mask);
	fchmod(o->fd, 0666 & ~mask);
	return 0;
}

int capy_outfile_truncate(struct capy_outfile *o, uint64_t size, struct capy_err *err)
{
	if (ftruncate(o->fd, (off_t)size) < 0)
		return capy_err_errno(err, errno, "cannot size '%s' to %" PRIu64 " bytes", o->tmp_path, size);
	return 0;
}

int capy_outfile_commit(struct capy_outfile *o, struct capy_err *err)
{
	char *dir;
	int rc = 0, dfd;

	if (fsync(o->fd) < 0) {
		rc = capy_err_errno(err, errno, "cannot flush '%s' to disk", o->tmp_path);
		goto fail;
	}
	if (close(o->fd) < 0) {
		o->fd = -1;
		rc = capy_err_errno(err, errno, "cannot close '%s'", o->tmp_path);
		goto fail;
	}
	o->fd = -1;
	if (rename(o->tmp_path, o->path) < 0) {
		rc = capy_err_errno(err, errno, "cannot rename '%s' to '%s'", o->tmp_path, o->path);
		goto fail;
	}
	free(o->tmp_path);
	o->tmp_path = NULL;
	dir = dir_of(o->path);
	if (dir) {
		dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dfd >= 0) {
			fsync(dfd);
			close(dfd);
		}
		free(dir);
	}
	free(o->path);
	o->path = NULL;
	return 0;
fail:
	capy_outfile_abort(o);
	return rc;
}

void capy_outfile_abort(struct capy_outfile *o)
{
	if (o->fd >= 0)
		close(o->fd);
	o->fd = -1;
	if (o->tmp_path) {
		unlink(o->tmp_path);
		free(o->tmp_path);
		o->tmp_path = NULL;
	}
	free(o->path);
	o->path = NULL;
}
