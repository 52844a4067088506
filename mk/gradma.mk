# GradMA (Luo et al., CVPR 2023): Tables 1–2, Figs. 1–7, and the claims, at SCALE (paper | small | tiny).
# Included by the Makefile. Runs go to $(OUT)/$(SCALE); tables to tables/, figures to figures/.
#   make reproduce-gradma-table1 SCALE=tiny     # the 14 columns × 16 methods × 3 seeds on a CPU, 2 processes
#   make reproduce-gradma-table2 SCALE=tiny     # rounds to ac from the same runs (runs are skipped when done)
#   make reproduce-gradma-fig5 SCALE=tiny       # the (β1, β2) grid of GradMA-S: 2 settings × 38 methods × seeds
# Scenario files and every paper-silent choice: configs/gradma/README.md.

GRADMA          = configs/gradma
GRADMA_COLUMNS  = mnist_s10_w1.0 mnist_s10_w0.1 mnist_s10_w0.01 mnist_s5_w0.01 mnist_s50_w0.01 \
                  cifar10_s10_w1.0 cifar10_s10_w0.1 cifar10_s10_w0.01 \
                  cifar100_s5_w0.1 cifar100_s10_w0.1 cifar100_s50_w0.1 \
                  tiny_imagenet_s5_w0.01 tiny_imagenet_s5_w1.0 tiny_imagenet_s10_w1.0
GRADMA_TABLE    = $(addprefix $(GRADMA)/,$(addsuffix .yaml,$(GRADMA_COLUMNS)))
GRADMA_MEMORY   = $(addprefix $(GRADMA)/fig6_memory_,$(addsuffix .yaml,mnist_w0.1 mnist_w0.01 cifar10_w1.0))
# tiny: all S clients in one vmapped step (3× faster than client by client for GradMA on the CPU; MOON and FedMLB
# fall back to the sequential path by themselves); other scales: auto.
GRADMA_EXECUTOR = $(if $(filter tiny,$(SCALE)),--executor batched,)
GRADMA_COMPARE  = $(BIN)/fedbench compare --paper gradma --out $(PAPER_OUT) --scale $(SCALE) --tables-dir tables
# Figs. 1–4: the paper's selected curves, two panels each (the two datasets its caption names; the
# paper does not say which columns, configs/gradma/README.md lists ours), drawn from Table 1's runs.
GRADMA_FIGS     = fig1:mnist_s10_w0.01:FedAvg,FedProx,FedMLB,MOON,Scaffold,GradMA-W \
                  fig1:cifar10_s10_w0.1:FedAvg,FedProx,FedMLB,MOON,Scaffold,GradMA-W \
                  fig2:cifar100_s10_w0.1:FedAvgM,MIFA,MIFAM,GradMA-S \
                  fig2:tiny_imagenet_s10_w1.0:FedAvgM,MIFA,MIFAM,GradMA-S \
                  fig3:cifar10_s10_w0.1:FedProxM,FedMLBM,MOONM,FedDyn,MimeLite,GradMA \
                  fig3:cifar100_s10_w0.1:FedProxM,FedMLBM,MOONM,FedDyn,MimeLite,GradMA \
                  fig4:cifar10_s10_w0.01:GradMA,GradMA-S,GradMA-W \
                  fig4:tiny_imagenet_s10_w1.0:GradMA,GradMA-S,GradMA-W
# Figs. 5/21: GradMA-S over (β1, β2) ∈ {0, .1, .3, .5, .7, .9}², with MIFA and MIFAM; the curves drawn are a selection.
GRADMA_FIG5     = $(addprefix $(GRADMA)/fig5_betas_,$(addsuffix .yaml,mnist_w0.01 cifar10_w1.0))
GRADMA_FIG5_CURVES = --algorithm MIFA --algorithm MIFAM --algorithm 'GradMA-S β1=0.0 β2=0.0' \
                  --algorithm 'GradMA-S β1=0.5 β2=0.0' --algorithm 'GradMA-S β1=0.5 β2=0.5' --algorithm 'GradMA-S β1=0.5 β2=0.9'

.PHONY: reproduce-gradma reproduce-gradma-runs reproduce-gradma-table1 reproduce-gradma-table2 \
        reproduce-gradma-figures reproduce-gradma-fig5 reproduce-gradma-memory reproduce-gradma-claims

reproduce-gradma: reproduce-gradma-table1 reproduce-gradma-table2 reproduce-gradma-figures reproduce-gradma-fig5 reproduce-gradma-memory reproduce-gradma-claims  ## everything of GradMA at SCALE

# the two S = 50 columns first, so that two processes finish together
GRADMA_ORDER    = $(filter %s50_w0.01.yaml %s50_w0.1.yaml,$(GRADMA_TABLE)) $(filter-out %s50_w0.01.yaml %s50_w0.1.yaml,$(GRADMA_TABLE))

reproduce-gradma-runs: install
	$(call PAPER_RUN,$(GRADMA_ORDER),$(GRADMA_EXECUTOR))

reproduce-gradma-table1: reproduce-gradma-runs  ## GradMA Table 1 (top accuracy) at SCALE: paper / ours
	$(GRADMA_COMPARE) --table 1

reproduce-gradma-table2: reproduce-gradma-runs  ## GradMA Table 2 (rounds to ac, same runs) at SCALE: paper / ours
	$(GRADMA_COMPARE) --table 2

reproduce-gradma-figures: reproduce-gradma-runs  ## GradMA Figs. 1–4 (selected accuracy curves) in figures/
	for f in $(GRADMA_FIGS); do set -- $$(echo $$f | tr ':' ' '); \
	  $(BIN)/fedbench plot --out $(PAPER_OUT) --scenario gradma_$$2$(PAPER_SUFFIX) --x round --name $$1 \
	    $$(echo $$3 | tr ',' '\n' | sed 's/^/--algorithm /') || exit 1; done

reproduce-gradma-fig5: install  ## GradMA Figs. 5/21: GradMA-S over the (β1, β2) grid (top-accuracy tables, selected curves)
	$(call PAPER_RUN,$(GRADMA_FIG5),$(GRADMA_EXECUTOR))
	for s in mnist_w0.01 cifar10_w1.0; do \
	  $(BIN)/fedbench table --out $(PAPER_OUT) --scenario gradma_fig5_betas_$$s$(PAPER_SUFFIX) --tables-dir tables --no-show && \
	  $(BIN)/fedbench plot --out $(PAPER_OUT) --scenario gradma_fig5_betas_$$s$(PAPER_SUFFIX) --x round --name fig5 \
	    $(GRADMA_FIG5_CURVES) || exit 1; done

reproduce-gradma-memory: install  ## GradMA Figs. 6–7: GradMA-S vs memory size m (top-accuracy tables and curves)
	$(call PAPER_RUN,$(GRADMA_MEMORY),$(GRADMA_EXECUTOR))
	for s in mnist_w0.1 mnist_w0.01 cifar10_w1.0; do \
	  $(BIN)/fedbench table --out $(PAPER_OUT) --scenario gradma_fig6_memory_$$s$(PAPER_SUFFIX) --tables-dir tables && \
	  $(BIN)/fedbench plot --out $(PAPER_OUT) --scenario gradma_fig6_memory_$$s$(PAPER_SUFFIX) --x round || exit 1; done

reproduce-gradma-claims: install  ## GradMA claims on the SCALE runs and the paper's numbers: tables/gradma_claims_$(SCALE).md
	$(BIN)/fedbench claims --paper gradma --out $(PAPER_OUT) --scale $(SCALE) --tables-dir tables
