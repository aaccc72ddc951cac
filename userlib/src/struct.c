// SPDX-License-Identifier: LGPL-2.1-or-later
/* The rule of the structs that grow (p3.h): read and write a caller's
 * struct at the size it was built with. */
#include <errno.h>

#include "internal.h"

static size_t caller_size(const void *s, size_t first_size)
{
	uint32_t n;

	memcpy(&n, s, sizeof(n));
	return n ? n : first_size;
}

int p3_struct_in(void *dst, size_t dst_size, size_t first_size, const void *src)
{
	const uint8_t *s = src;
	size_t n = caller_size(src, first_size), i;
	uint32_t size = (uint32_t)dst_size;

	if (n < first_size)
		return -EINVAL;
	/* A field from a newer header that this library would ignore. */
	for (i = dst_size; i < n; i++)
		if (s[i])
			return -E2BIG;
	memcpy((uint8_t *)dst + sizeof(size), s + sizeof(size),
	       (n < dst_size ? n : dst_size) - sizeof(size));
	memcpy(dst, &size, sizeof(size));
	return 0;
}

int p3_struct_out_len(const void *dst, size_t src_size, size_t first_size)
{
	size_t n = caller_size(dst, first_size);

	if (n < first_size)
		return -EINVAL;
	return (int)(n < src_size ? n : src_size);
}
