// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * p3ctl run: a job, unmodified, in a band.
 *
 *   p3ctl run --level N [--tag dscp|priority|mark] [--] CMD [ARG...]
 *
 * Runs CMD with libp3run.so preloaded (run/shim.c), which tags every IP
 * socket CMD and its children create with level N.  Everything that can
 * be checked is checked before CMD starts, so that a job either runs
 * tagged or does not run: the level and method (a probe socket is tagged
 * as the job's will be, so a missing capability shows here), the shim's
 * path.  A command that LD_PRELOAD cannot reach (a static or set-id
 * binary) is named with a warning.  CMD replaces p3ctl, so its exit
 * status is the job's.
 */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "p3.h"
#include "cli.h"

#ifndef P3_RUN_SHIM
#define P3_RUN_SHIM	"/usr/local/lib/p3/libp3run.so"
#endif
#define SHIM_NAME	"libp3run.so"

static void run_usage(FILE *f)
{
	fputs("usage: p3ctl run --level N [--tag dscp|priority|mark] [--] CMD [ARG...]\n"
	      "Runs CMD with every IP socket it and its children create tagged with\n"
	      "level N (0 most urgent), so that its packets reach band N of sch_p3.\n"
	      "See p3ctl(1).\n", f);
}

/* The shim beside this p3ctl (a build tree), else where install put it. */
static int find_shim(char *path, size_t len)
{
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	char *slash;

	if (n > 0) {
		exe[n] = '\0';
		slash = strrchr(exe, '/');
		if (slash) {
			*slash = '\0';
			if ((size_t)snprintf(path, len, "%s/%s", exe, SHIM_NAME) < len &&
			    !access(path, R_OK))
				return 0;
		}
	}
	snprintf(path, len, "%s", P3_RUN_SHIM);
	return access(path, R_OK) ? -errno : 0;
}

/* Tag a probe socket as the job's will be: a level out of the method's
 * range or a missing capability is reported before anything runs. */
static int probe_tag(unsigned int level, int method)
{
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0), err;

	if (fd < 0)
		fd = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	err = p3_tag_ex(fd, level, method, 0);
	close(fd);
	return err;
}

/* CMD's path as execvp() will find it, or NULL. */
static const char *which(const char *cmd, char *buf, size_t len)
{
	const char *p = getenv("PATH"), *colon;
	size_t dl;

	if (strchr(cmd, '/'))
		return cmd;
	/* An empty element, a trailing one too, is the current directory. */
	for (p = p ? p : "/usr/local/bin:/usr/bin:/bin";; p = colon + 1) {
		colon = strchrnul(p, ':');
		dl = (size_t)(colon - p);
		if ((int)snprintf(buf, len, "%.*s%s%s", (int)dl, p, dl ? "/" : "./", cmd) < (int)len &&
		    !access(buf, X_OK))
			return buf;
		if (!*colon)
			return NULL;
	}
}

/* Whether the loader that would preload the shim runs for path, and if
 * not, why: an ELF with no program interpreter (static), one of another
 * class (a 32-bit program cannot load the 64-bit shim), or a Go program
 * (a "Go" ELF note: Go makes its own system calls, cgo or not). */
static const char *unreachable_elf(const char *path)
{
	Elf64_Ehdr eh;
	Elf64_Phdr ph;
	char note[512];
	int fd = open(path, O_RDONLY | O_CLOEXEC), i, interp = 0, go = 0;
	ssize_t n;

	if (fd < 0)
		return NULL;
	if (pread(fd, &eh, sizeof(eh), 0) != sizeof(eh) || memcmp(eh.e_ident, ELFMAG, SELFMAG)) {
		close(fd);
		return NULL;		/* a script: its interpreter is looked at by the loader */
	}
	if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_phentsize != sizeof(ph)) {
		close(fd);
		return "a 32-bit program, which cannot load the 64-bit shim";
	}
	for (i = 0; i < eh.e_phnum; i++) {
		if (pread(fd, &ph, sizeof(ph), (off_t)(eh.e_phoff + (Elf64_Off)i * sizeof(ph))) !=
		    sizeof(ph))
			break;
		interp |= ph.p_type == PT_INTERP;
		if (ph.p_type != PT_NOTE || go)
			continue;
		/* Go's build-ID note: namesz 4, "Go\0\0" after the 12-byte header. */
		n = pread(fd, note, sizeof(note), (off_t)ph.p_offset);
		for (ssize_t k = 0; k + 16 <= n && k + 16 <= (ssize_t)ph.p_filesz; k += 4)
			if (!memcmp(note + k, "\4\0\0\0", 4) && !memcmp(note + k + 12, "Go\0\0", 4))
				go = 1;
	}
	close(fd);
	if (i < eh.e_phnum)
		return NULL;
	if (go)
		return "a Go program, which makes its own system calls";
	return interp ? NULL : "statically linked";
}

static void warn_unreachable(const char *cmd)
{
	char buf[PATH_MAX];
	const char *path = which(cmd, buf, sizeof(buf)), *why;
	struct stat st;

	if (!path || stat(path, &st))
		return;		/* execvp() says why */
	why = unreachable_elf(path);
	if (!why && ((st.st_mode & S_ISUID && st.st_uid != geteuid()) ||
		     (st.st_mode & S_ISGID && st.st_gid != getegid())))
		why = "set-user-ID or set-group-ID: the loader ignores LD_PRELOAD for it";
	if (why)
		fprintf(stderr, "p3ctl run: warning: %s is %s: the sockets it opens itself stay "
			"untagged (p3ctl(1), RUN)\n", path, why);
}

/* The shim after what LD_PRELOAD already names (a sanitizer's runtime
 * must stay first). */
static int set_preload(const char *shim)
{
	const char *old = getenv("LD_PRELOAD");
	char *v;
	int err;

	if (!old || !*old)
		return setenv("LD_PRELOAD", shim, 1) ? -errno : 0;
	if (asprintf(&v, "%s:%s", old, shim) < 0)
		return -ENOMEM;
	err = setenv("LD_PRELOAD", v, 1) ? -errno : 0;
	free(v);
	return err;
}

int cmd_run(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "level", required_argument, NULL, 'l' },
		{ "tag", required_argument, NULL, 't' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	char shim[PATH_MAX], lvl[24], *end;
	int o, method = P3_METHOD_DSCP, err;
	long level = -1;

	optind = 1;
	/* "+": options end at CMD, whose own options are its. */
	while ((o = getopt_long(argc, argv, "+l:t:h", lo, NULL)) != -1) {
		switch (o) {
		case 'l':
			level = strtol(optarg, &end, 10);
			if (!*optarg || *end || level < 0 || level >= P3_MAX_BANDS) {
				fprintf(stderr, "p3ctl run: --level takes 0 to %d, not \"%s\"\n",
					P3_MAX_BANDS - 1, optarg);
				return 2;
			}
			break;
		case 't':
			method = p3_tag_method_parse(optarg);
			if (method <= P3_METHOD_DEFAULT) {
				fprintf(stderr, "p3ctl run: --tag takes dscp, priority or mark\n");
				return 2;
			}
			break;
		case 'h':
			run_usage(stdout);
			return 0;
		default:
			run_usage(stderr);
			return 2;
		}
	}
	if (level < 0 || optind >= argc) {
		fprintf(stderr, "p3ctl run: %s\n", level < 0 ? "--level is required" :
			"no command to run");
		run_usage(stderr);
		return 2;
	}
	err = probe_tag((unsigned int)level, method);
	if (err) {
		fprintf(stderr, "p3ctl run: cannot tag with level %ld by %s: %s\n", level,
			p3_tag_method_name(method), p3_strerror(err));
		return 2;
	}
	if (find_shim(shim, sizeof(shim))) {
		fprintf(stderr, "p3ctl run: %s is neither beside p3ctl nor at %s: reinstall "
			"p3-tools\n", SHIM_NAME, P3_RUN_SHIM);
		return 2;
	}
	if (strpbrk(shim, ": ")) {
		fprintf(stderr, "p3ctl run: %s: LD_PRELOAD cannot name a path with ':' or ' '\n",
			shim);
		return 2;
	}
	snprintf(lvl, sizeof(lvl), "%ld", level);
	if (setenv("P3_RUN_LEVEL", lvl, 1) || setenv("P3_RUN_TAG", p3_tag_method_name(method), 1) ||
	    set_preload(shim)) {
		perror("p3ctl run: environment");
		return 2;
	}
	warn_unreachable(argv[optind]);
	execvp(argv[optind], argv + optind);
	err = errno;
	fprintf(stderr, "p3ctl run: %s: %s\n", argv[optind], strerror(err));
	return err == ENOENT ? 127 : 126;
}
