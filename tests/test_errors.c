#include <criterion/criterion.h>
#include "ringfetch.h"
Test(placeholder, errors) { cr_assert(1); }
