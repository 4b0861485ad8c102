#include <criterion/criterion.h>
#include "ringfetch.h"
Test(placeholder, lower) { cr_assert(1); }
