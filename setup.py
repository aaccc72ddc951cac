# SPDX-License-Identifier: LGPL-2.1-or-later
"""libp3.so into the package as p3/libp3.so: a plain shared library that
p3/_libp3.py loads with ctypes, not a Python extension.  userlib/Makefile
builds it, so its sources, flags, defines and version script are the ones
`make -C userlib` and the Debian packages use, written nowhere else.

Without make, a C compiler or libnl's headers (pkg-config libnl-route-3.0)
the build warns and the wheel is pure Python: p3 then loads the system's
libp3 (Debian's libp3-1) or P3_LIB.  The rest of the metadata is in
pyproject.toml.
"""
import os
import re
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.command.build_ext import build_ext

USERLIB = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'userlib')


def libp3_version():
    with open(os.path.join(USERLIB, 'Makefile')) as f:
        return re.search(r'^VERSION\s*:=\s*(\S+)', f.read(), re.M).group(1)


def missing():
    """What building libp3 needs and this machine lacks."""
    cc = (os.environ.get('CC') or 'cc').split()[0]
    lack = ['`%s`' % t for t in ('make', cc) if not shutil.which(t)]
    if not shutil.which('pkg-config'):
        lack.append('`pkg-config`')
    elif subprocess.call(['pkg-config', '--exists', 'libnl-route-3.0']):
        lack.append("libnl's headers (pkg-config libnl-route-3.0)")
    return lack


class BuildLibp3(build_ext):
    """The one "extension", p3.libp3, is userlib/Makefile's libp3.so."""

    def get_ext_filename(self, fullname):
        # Not Python's EXT_SUFFIX: ctypes loads it by this name.
        return os.path.join(*fullname.split('.')) + '.so'

    def build_extension(self, ext):
        # The objects go under setuptools' build_temp, apart from make's
        # own build/userlib, which the source tree's p3 loads.
        build = os.path.abspath(self.build_temp)
        lib = os.path.join(build, 'userlib', 'libp3.so')
        subprocess.check_call(['make', '-C', USERLIB,
                               '-j%d' % (os.cpu_count() or 1),
                               'BUILD=' + build, lib])
        dest = self.get_ext_fullpath(ext.name)
        self.mkpath(os.path.dirname(dest))
        self.copy_file(lib, dest)


class Bdist(bdist_wheel):
    """libp3.so uses no Python ABI: one wheel for every Python 3 on the
    platform (py3-none-linux_x86_64), or py3-none-any without it."""

    def get_tag(self):
        return 'py3', 'none', super().get_tag()[2]


lack = missing()
if lack:
    sys.stderr.write(
        '\nWARNING: sch-p3: libp3 is NOT built into this package: no %s.\n'
        'The package is pure Python and p3 will load the system\'s libp3 '
        '(Debian: apt install libp3-1) or the library named by P3_LIB.\n'
        'To build it in: apt install make gcc pkg-config libnl-3-dev '
        'libnl-route-3-dev, and reinstall.\n\n' % ', no '.join(lack))

setup(version=libp3_version(),
      ext_modules=[] if lack else [Extension('p3.libp3', sources=[])],
      cmdclass={'build_ext': BuildLibp3, 'bdist_wheel': Bdist})
