# The waste of the size-class table, from `zsm_stats --class-table` (the pool's own classes,
# 4 KiB pages) at chain 4, 8 and 16: files classes-chain{4,8,16}.dat in `dir`.
# Left: the tail of each class's zspage that no object covers, as a share of the zspage (what
# the kernel's chain-size rule minimises). Right, chain 8: the memory an object costs beyond
# its payload (slot header, rounding up to the class size, its share of the tail), for the
# smallest and the largest payload the class serves; the band between is where every object
# of the class lies.
# Variables (gnuplot -e): dir, out, term (pngcairo or png).
set terminal @term size 1400,560 noenhanced
set output out
set datafile commentschars "#"
set multiplot layout 1,2
set grid
set key top right
set xlabel "class size (B, header included)"
set xrange [0:4200]

set title "zspage tail waste per class"
set ylabel "bytes of the zspage no object covers (%)"
plot for [c in "4 8 16"] sprintf("%s/classes-chain%s.dat", dir, c) \
       using 2:(100.0 * $6 / $5) with linespoints pt 7 ps 0.5 title sprintf("chain %s", c)

set title "cost beyond the payload, chain 8 (small classes above the scale)"
set ylabel "bytes per object beyond its payload (%)"
set yrange [0:40]
footprint(zspage, objs) = zspage / objs
f8 = sprintf("%s/classes-chain8.dat", dir)
plot f8 using 2:(100.0 * (1 - $8 / footprint($5, $4))):(100.0 * (1 - $7 / footprint($5, $4))) \
       with filledcurves fs transparent solid 0.3 lc 2 title "band: largest .. smallest payload", \
     f8 using 2:(100.0 * (1 - $7 / footprint($5, $4))) with lines lc 2 title "smallest payload", \
     f8 using 2:(100.0 * (1 - $8 / footprint($5, $4))) with lines lc 3 title "largest payload"
unset multiplot
