# zsm_pair_bench results (bench_dat.py's table: size, then ns per pair for zs_store+zs_free
# patched and baseline, malloc+memcpy+free on mimalloc and glibc, zs_malloc+zs_obj_write+zs_free
# patched and baseline, and ns per zs_obj_read+copy patched and baseline).
# Left: the pair the kernel mail measures against the mallocs; right: the older write path and
# the read.
# Variables (gnuplot -e): data, out, term (pngcairo or png).
set terminal @term size 1400,560 noenhanced
set output out
set datafile missing "NaN"
set multiplot layout 1,2
set grid
set key top left
set xlabel "object size (B)"
set ylabel "ns per pair (median over repetitions)"
set yrange [0:*]

set title "store + free, steady state (live set of 1024 per size)"
plot data using 1:2 with linespoints pt 7 lc 1 title "zs_store+zs_free patched", \
     data using 1:3 with linespoints pt 6 dt 2 lc 1 title "zs_store+zs_free baseline", \
     data using 1:4 with linespoints pt 5 lc 2 title "malloc+memcpy+free mimalloc", \
     data using 1:5 with linespoints pt 4 lc 3 title "malloc+memcpy+free glibc"

set title "zsm's other paths"
set ylabel "ns per pair, or per read"
plot data using 1:6 with linespoints pt 7 lc 4 title "zs_malloc+zs_obj_write+zs_free patched", \
     data using 1:7 with linespoints pt 6 dt 2 lc 4 title "zs_malloc+zs_obj_write+zs_free baseline", \
     data using 1:8 with linespoints pt 7 lc 6 title "zs_obj_read+copy patched", \
     data using 1:9 with linespoints pt 6 dt 2 lc 6 title "zs_obj_read+copy baseline"
unset multiplot
