/*
 * test_server_stop.c - stop strings over streamed text (server/stop.h): text that may begin a stop string
 * is held back until the next piece decides it, a stop split over several pieces is caught and never
 * emitted, the earliest of several stops wins, a false start is released as soon as it is one, the final
 * piece releases everything held, and nothing comes back after a match.
 */
#include "harness.h"
#include "stop.h"

#include <string.h>

/* Feed pieces one by one; returns the emitted text (static buffer) and sets *matched. */
static const char *run(const char *const *stops, int32_t n_stops, const char *const *pieces, int n,
                       bool *matched) {
    static char out[256];
    size_t len = 0;
    ks_stop s;
    CHECK_OK(ks__stop_init(&s, stops, n_stops));
    *matched = false;
    for (int i = 0; i < n; i++) {
        kiln_str emit;
        bool m = false;
        CHECK_OK(ks__stop_push(&s, pieces[i], strlen(pieces[i]), i == n - 1, &emit, &m));
        if (*matched) CHECK_EQ_INT(emit.len, 0);
        memcpy(out + len, emit.data, emit.len);
        len += emit.len;
        *matched = *matched || m;
    }
    out[len] = '\0';
    ks__stop_free(&s);
    return out;
}

/* What each push emits, to pin the holding back itself. */
static void held_text_waits_for_the_next_piece_and_a_false_start_is_released(void) {
    const char *stops[1] = {"END"};
    ks_stop s;
    CHECK_OK(ks__stop_init(&s, stops, 1));
    kiln_str emit;
    bool m;
    CHECK_OK(ks__stop_push(&s, "the E", 5, false, &emit, &m));
    CHECK_EQ_INT(emit.len, 4); /* "the " out, "E" held */
    CHECK_OK(ks__stop_push(&s, "N", 1, false, &emit, &m));
    CHECK_EQ_INT(emit.len, 0);                             /* "EN" held */
    CHECK_OK(ks__stop_push(&s, "x", 1, false, &emit, &m)); /* "ENx" can no longer become "END" */
    CHECK(!m);
    CHECK_EQ_INT(emit.len, 3);
    CHECK(memcmp(emit.data, "ENx", 3) == 0);
    ks__stop_free(&s);
}

static void a_stop_split_over_three_pieces_is_cut_exactly(void) {
    const char *stops[1] = {"The End"};
    const char *pieces[4] = {"and so. Th", "e E", "nd of it", "!"};
    bool m;
    CHECK_STR(run(stops, 1, pieces, 4, &m), "and so. ");
    CHECK(m);
}

static void the_earliest_of_several_stops_wins(void) {
    const char *stops[3] = {"zzz", "cd", "bcd"};
    const char *pieces[2] = {"ab", "cdef"};
    bool m;
    CHECK_STR(run(stops, 3, pieces, 2, &m), "a");
    CHECK(m);
}

static void overlapping_prefixes_hold_only_what_may_still_match(void) {
    const char *stops[1] = {"aab"};
    const char *pieces[3] = {"xaa", "a", "ab!"};
    bool m;
    CHECK_STR(run(stops, 1, pieces, 3, &m), "xaa");
    CHECK(m);
}

static void the_final_piece_releases_held_text(void) {
    const char *stops[1] = {"STOP"};
    const char *pieces[2] = {"go ST", "O"};
    bool m;
    CHECK_STR(run(stops, 1, pieces, 2, &m), "go STO");
    CHECK(!m);
}

static void multibyte_stops_match_as_bytes_and_cut_on_a_character_boundary(void) {
    const char *stops[1] = {"\xC3\xA9t\xC3\xA9"}; /* "été" */
    const char *pieces[3] = {"un \xC3", "\xA9t\xC3", "\xA9 chaud"};
    bool m;
    CHECK_STR(run(stops, 1, pieces, 3, &m), "un ");
    CHECK(m);
}

static void without_stops_text_passes_through_untouched(void) {
    const char *pieces[2] = {"a", "b"};
    bool m;
    CHECK_STR(run(NULL, 0, pieces, 2, &m), "ab");
    CHECK(!m);
}

static void a_piece_larger_than_the_buffer_grows_it(void) {
    const char *stops[1] = {"X"};
    char big[200];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    big[150] = 'X';
    const char *pieces[1] = {big};
    bool m;
    CHECK_EQ_INT(strlen(run(stops, 1, pieces, 1, &m)), 150);
    CHECK(m);
}

int main(void) {
    RUN(held_text_waits_for_the_next_piece_and_a_false_start_is_released);
    RUN(a_stop_split_over_three_pieces_is_cut_exactly);
    RUN(the_earliest_of_several_stops_wins);
    RUN(overlapping_prefixes_hold_only_what_may_still_match);
    RUN(the_final_piece_releases_held_text);
    RUN(multibyte_stops_match_as_bytes_and_cut_on_a_character_boundary);
    RUN(without_stops_text_passes_through_untouched);
    RUN(a_piece_larger_than_the_buffer_grows_it);
    return harness_finish();
}
