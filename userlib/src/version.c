// SPDX-License-Identifier: LGPL-2.1-or-later
/* The library's version, for programs to check at run time what they
 * were loaded with (the SONAME only says which ABI).
 */
#include "internal.h"

P3_EXPORT const char *p3_version(void)
{
	return P3_LIB_VERSION;
}
