#include <criterion/criterion.h>
#include "ringfetch.h"
Test(placeholder, config) { cr_assert(1); }
