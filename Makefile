# SPDX-License-Identifier: GPL-2.0
#
# sch_p3 top-level build.
#   make               module for every installed kernel, tc plugin, libp3
#   make check         install deps, build, run host tests and VM selftests
#   make check-debug   VM selftests, netlink fuzzing, churn and fault injection
#                      on a debug kernel (KASAN, lockdep, kmemleak), built once
#   make demo          the main job: VGG-19 training emulation, FIFO vs P3
#   make install       module (running kernel), plugin, libp3, man pages,
#                      the systemd unit p3@.service and /etc/default/p3
#   make dkms-install  copy the module sources for DKMS
#   make deb           Debian packages in build/deb/ (sch-p3-dkms, libp3-1,
#                      libp3-dev, python3-p3, p3-tools), checked by lintian
# W=1 and C=2 are passed on to kbuild (e.g. `make module W=1 C=2`).

BUILD   := $(CURDIR)/build
VERSION := 0.2
PREFIX  ?= /usr/local
DESTDIR ?=
SYSTEMDUNITDIR ?= /lib/systemd/system
# Every kernel with headers installed; set KVERS to build for fewer.
KVERS   ?= $(sort $(patsubst /lib/modules/%/build,%,$(wildcard /lib/modules/*/build)))
KVER    ?= $(shell uname -r)
MODDIR  := $(BUILD)/kmod

export BUILD

.PHONY: all deps module tc userlib udpflood check check-run check-debug demo demo-run \
	install module-install dist-install dkms-install deb clean

all: module tc userlib udpflood

deps:
	@scripts/deps.sh

# kbuild is incremental by itself, so it always runs: that way
# `make module C=2` re-checks every file with sparse.
module:
	@for v in $(KVERS); do scripts/kmod-build.sh "$$v" "$(MODDIR)/$$v" || exit 1; done

tc:
	@$(MAKE) --no-print-directory -C tc BUILD=$(BUILD)

# The C flood sender of bench/overhead, which the GC selftest uses too.
udpflood: $(BUILD)/bench/overhead/udpflood
$(BUILD)/bench/overhead/udpflood: bench/overhead/udpflood.c
	@mkdir -p $(@D)
	$(CC) -O2 -Wall -Wextra -Werror -o $@ $<

userlib:
	@$(MAKE) --no-print-directory -C userlib BUILD=$(BUILD)

# deps first, then a fresh make, so that KVERS sees kernels just installed.
check: deps
	@$(MAKE) --no-print-directory check-run

check-run:
	@scripts/check.sh

check-debug: deps
	@scripts/check-debug.sh

demo: deps
	@$(MAKE) --no-print-directory demo-run

demo-run: all
	@bench/demo.sh

install: module-install
	@$(MAKE) --no-print-directory -C tc install BUILD=$(BUILD) DESTDIR=$(DESTDIR)
	@$(MAKE) --no-print-directory -C userlib install BUILD=$(BUILD) DESTDIR=$(DESTDIR) PREFIX=$(PREFIX)
	install -D -m 644 docs/tc-p3.8 $(DESTDIR)$(PREFIX)/share/man/man8/tc-p3.8
	@$(MAKE) --no-print-directory dist-install DESTDIR=$(DESTDIR) PREFIX=$(PREFIX)

# p3@.service, with p3ctl where this install puts it, and the example
# /etc/default/p3 unless there is one: a host's own options are kept.
dist-install:
	install -d $(DESTDIR)$(SYSTEMDUNITDIR)
	sed 's|/usr/bin/p3ctl|$(PREFIX)/bin/p3ctl|' dist/systemd/p3@.service \
		>$(DESTDIR)$(SYSTEMDUNITDIR)/p3@.service
	chmod 644 $(DESTDIR)$(SYSTEMDUNITDIR)/p3@.service
	[ -e $(DESTDIR)/etc/default/p3 ] || \
		install -D -m 644 dist/default/p3 $(DESTDIR)/etc/default/p3
	[ -n "$(DESTDIR)" ] || [ ! -d /run/systemd/system ] || systemctl daemon-reload

module-install:
	@scripts/kmod-build.sh "$(KVER)" "$(MODDIR)/$(KVER)"
	install -D -m 644 $(MODDIR)/$(KVER)/sch_p3.ko \
		$(DESTDIR)/lib/modules/$(KVER)/updates/sch_p3.ko
	[ -n "$(DESTDIR)" ] || depmod -a $(KVER)

DKMS_DIR := $(DESTDIR)/usr/src/sch_p3-$(VERSION)
deb:
	@scripts/deb-build.sh

dkms-install:
	install -d $(DKMS_DIR)/kmod $(DKMS_DIR)/include/uapi/linux
	install -m 644 dkms.conf Kbuild $(DKMS_DIR)/
	install -m 644 kmod/Kbuild kmod/*.c kmod/*.h $(DKMS_DIR)/kmod/
	install -m 644 include/uapi/linux/pkt_sched_p3.h $(DKMS_DIR)/include/uapi/linux/
	@echo "now: dkms install sch_p3/$(VERSION)"

clean:
	rm -rf $(BUILD)
