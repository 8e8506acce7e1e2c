# Pool utilization over a workload, from `zsm_stats --trace` (columns: op seconds pages
# held_bytes live_bytes utilization freeable compacted). Utilization (live bytes over the pages
# held) on the left axis, pages held and pages compaction could free on the right; each row
# where compaction freed pages is marked, with how many.
# Variables (gnuplot -e): trace, out, term (pngcairo or png), title.
set terminal @term size 1200,600 noenhanced
set output out
set title title
set grid
set key bottom right
set xlabel "operations (stores and frees; puts for a cache)"
set ylabel "utilization: live bytes / pages held (%)"
set yrange [0:105]
set y2label "pages"
set y2range [0:*]
set ytics nomirror
set y2tics
plot trace using 1:(100.0 * $6) with lines lw 2 lc 1 title "utilization", \
     trace using 1:3 axes x1y2 with lines lc 2 title "pages held", \
     trace using 1:7 axes x1y2 with lines dt 2 lc 3 title "pages freeable", \
     trace using 1:($8 > 0 ? 100.0 * $6 : 1/0) with points pt 9 ps 2 lc 7 title "compaction", \
     trace using 1:($8 > 0 ? 100.0 * $6 : 1/0):(sprintf("-%d pages", $8)) with labels \
       offset 0,1.2 tc lt 7 notitle
