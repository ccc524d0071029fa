/* test_smoke.c - placeholder removed once real tests exist. */
#include "harness.h"
static void status_names_are_stable(void) { CHECK_STR(kiln_status_name(KILN_E_FORMAT), "KILN_E_FORMAT"); }
int main(void) { RUN(status_names_are_stable); return harness_finish(); }
