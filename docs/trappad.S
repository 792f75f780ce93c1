/* SIGTRAP handler placed in the target (see src/x86/trappad.rs). rdi = signal, rsi = siginfo, rdx = ucontext.
 * Data page at pad+4096: [0] number of table entries, [8] spin counter, [16] a SIG_DFL k_sigaction (32 bytes),
 * [128..] table: site addresses; bit 63 set: a trampoline int3, continue after it instead of rewinding; bit 62 set:
 * a guard int3 (a breakpoint's second byte, where a thread lands when its tracer died holding it just past the
 * breakpoint's int3): rewind onto the breakpoint, the byte before. */
    .text
    .globl pad
pad:
    leaq 4096-7(%rip), %r9           /* the data page (this instruction is 7 bytes) */
    movl 8(%rsi), %ecx              /* si_code */
    leal -1(%rcx), %eax             /* TRAP_BRKPT (a stepped `syscall`), TRAP_TRACE: a single step */
    cmpl $1, %eax                   /* begun by a tracer now gone */
    ja 1f
    andq $~0x100, 176(%rdx)         /* clear TF in the saved flags */
    ret
1:  cmpl $6, %ecx                   /* TRAP_PERF: a page-fault sample's signal, sent before its tracer died */
    jne 4f
    movabsq $0x5359534341544348, %rax /* si_perf_data: syscatch's cookie ("SYSCATCH"); another is the target's */
    cmpq %rax, 24(%rsi)
    jne foreign
    ret
4:  cmpl $0x80, %ecx                /* SI_KERNEL: an int3 */
    jne foreign
    movq 168(%rdx), %r8
    decq %r8                        /* the int3's address */
    movq (%r9), %r10
    leaq 128(%r9), %r11
2:  testq %r10, %r10
    jz notlisted
    movq (%r11), %rax
    btrq $63, %rax                  /* the flags are not part of the address */
    btrq $62, %rax
    cmpq %rax, %r8
    je listed
    addq $8, %r11
    decq %r10
    jmp 2b
listed:
    cmpq $0, (%r11)
    js 3f                            /* a trampoline int3: go on after it, as its nop would */
    btq $62, (%r11)                 /* a guard int3, on a breakpoint's second byte: the site is the byte before */
    jnc 5f
    decq %r8
5:  movq %r8, 168(%rdx)             /* rewind onto the site */
    cmpb $0xcc, (%r8)
    jne 3f                          /* the original byte is back: run it */
    lock incq 8(%r9)
    cmpq $1000000, 8(%r9)
    ja foreign                      /* nobody restores it: give up, as if we were never here */
    movl $24, %eax                  /* sched_yield: let the guardian put the byte back, then trap again */
    syscall
3:  ret
notlisted:
    cmpb $0xcc, (%r8)
    je foreign                      /* the program's own int3 */
    ret                             /* a stale trap of ours whose thread was already moved on by the tracer */
foreign:
    /* The target's own SIGTRAP: the default action back, and the signal again, so it does what it would have. */
    movl $13, %eax                  /* rt_sigaction(SIGTRAP, &dfl, NULL, 8) */
    movl $5, %edi
    leaq 16(%r9), %rsi
    xorl %edx, %edx
    movl $8, %r10d
    syscall
    movl $39, %eax                  /* getpid */
    syscall
    movl %eax, %edi
    movl $186, %eax                 /* gettid */
    syscall
    movl %eax, %esi
    movl $5, %edx
    movl $234, %eax                 /* tgkill(pid, tid, SIGTRAP): pending until the handler returns */
    syscall
    ret
    .globl restorer
restorer:
    movl $15, %eax                  /* rt_sigreturn */
    syscall
