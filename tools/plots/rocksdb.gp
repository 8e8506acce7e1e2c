# zsm as RocksDB's secondary cache against RocksDB's own, from bench/rocksdb_bench's --out
# file (tools/run-rocksdb-bench.sh): a line per tier with, for the Zipf then the uniform key
# choice, reads/s at 1 and 2 threads, the secondary tier's hit ratio and its blocks held.
# Left: reads per second; right: the secondary hit ratio.
# Variables (gnuplot -e): data, out, term (pngcairo or png).
set terminal @term size 1400,560 noenhanced
set output out
set datafile commentschars "#"
set datafile missing "-"  # a tier not run for one key choice
set multiplot layout 1,2
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set grid ytics
set key top left
set xtics rotate by -20

set title "reads per second (same primary LRU; secondary 32 MiB, rocksdb-lz4-rss at zsm-2nd's RSS)"
set ylabel "reads/s"
set yrange [0:*]
plot data using 2:xtic(1) title "zipf, 1 thread", '' using 3 title "zipf, 2 threads", \
     '' using 6 title "uniform, 1 thread", '' using 7 title "uniform, 2 threads"

set title "secondary tier hit ratio (of the primary's misses)"
set ylabel "hit ratio (%)"
set yrange [0:100]
plot data using (100 * $4):xtic(1) title "zipf", '' using (100 * $8) title "uniform"
unset multiplot
